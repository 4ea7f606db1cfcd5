/* MIG profiles by name (go-nvlib's parseMigProfile) and a GPU's layout
 * as mig-parted flattens it (types.MigConfig.Flatten). */
#include "migparted/migparted.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<digits><suffix>" exactly: the number, or -1. */
static long profile_field(const char *s, size_t len, const char *suffix)
{
    size_t sl = strlen(suffix);
    if (len <= sl || strncmp(s + len - sl, suffix, sl))
        return -1;
    long v = 0;
    for (size_t i = 0; i < len - sl; i++) {
        if (!isdigit((unsigned char)s[i]) || v > 100000)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Attributes: dot-separated words of letters ("me", "me.all", "gfx"). */
static bool profile_attrs_ok(const char *s)
{
    if (!*s || *s == '.')
        return false;
    for (const char *p = s; *p; p++)
        if (!(isalpha((unsigned char)*p) || (*p == '.' && p[1] && p[1] != '.')))
            return false;
    return true;
}

int migparted_profile_parse(const char *name, struct migparted_profile *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    const char *plus = strchr(name, '+'), *minus = strchr(name, '-');
    if (!*name)
        return err_set(e, "the profile is the empty string");
    if (plus && minus)
        return err_set(e, "both '+' and '-' attributes");
    const char *attr = plus ? plus : minus;
    size_t base = attr ? (size_t)(attr - name) : strlen(name);
    if (attr) {
        if (strlen(attr + 1) >= sizeof out->attrs || !profile_attrs_ok(attr + 1))
            return err_set(e, "attributes '%s' are not words such as me, me.all or gfx", attr + 1);
        snprintf(out->attrs, sizeof out->attrs, "%s", attr + 1);
        out->negative = minus != NULL;
    }
    /* [<C>c.]<G>g.<GB>gb */
    const char *f[3];
    size_t fl[3];
    unsigned nf = 0;
    for (const char *p = name, *end = name + base; p <= end && nf < 3;) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        f[nf] = p;
        fl[nf++] = (size_t)((dot ? dot : end) - p);
        if (!dot)
            break;
        p = dot + 1;
        if (nf == 3)
            return err_set(e, "more than three fields before its attributes");
    }
    long c = -1, g, gb;
    if (nf == 3) {
        c = profile_field(f[0], fl[0], "c");
        g = profile_field(f[1], fl[1], "g");
        gb = profile_field(f[2], fl[2], "gb");
    } else if (nf == 2) {
        g = profile_field(f[0], fl[0], "g");
        gb = profile_field(f[1], fl[1], "gb");
    } else {
        return err_set(e, "not of the form <G>g.<GB>gb or <C>c.<G>g.<GB>gb");
    }
    if ((nf == 3 && c <= 0) || g <= 0 || gb <= 0)
        return err_set(e, "not of the form <G>g.<GB>gb or <C>c.<G>g.<GB>gb (numbers above 0)");
    if (nf == 3 && c > g)
        return err_set(e, "%ld compute slices in a GPU instance of %ld", c, g);
    out->c = (unsigned)(nf == 3 ? c : g);
    out->g = (unsigned)g;
    out->gb = (unsigned)gb;
    return 0;
}

bool migparted_profile_same(const struct migparted_profile *a, const struct migparted_profile *b)
{
    return a->c == b->c && a->g == b->g && a->gb == b->gb && a->negative == b->negative &&
           !strcmp(a->attrs, b->attrs);
}

void migparted_profile_name(const struct migparted_profile *p, char *out, size_t len)
{
    char c[16] = "";
    if (p->c != p->g)
        snprintf(c, sizeof c, "%uc.", p->c);
    snprintf(out, len, "%s%ug.%ugb%s%s", c, p->g, p->gb, p->attrs[0] ? (p->negative ? "-" : "+") : "",
             p->attrs);
}

int migparted_layout_of(const struct migparted_entry *entry, struct migparted_layout *out,
                        struct err *e)
{
    out->n = 0;
    for (unsigned i = 0; entry->mig_enabled && i < entry->ncounts; i++)
        for (unsigned k = 0; k < entry->counts[i].count; k++) {
            if (out->n == MIGPARTED_INSTANCES)
                return err_set(e, "more than %d MIG devices on one GPU", MIGPARTED_INSTANCES);
            out->items[out->n++] = entry->counts[i].profile;
        }
    migparted_layout_sort(out);
    return 0;
}

/* Flatten's order: more GPU slices first, then more compute slices, then
 * by attributes (mig-parted compares them joined, the greater first). */
static int layout_cmp(const void *pa, const void *pb)
{
    const struct migparted_profile *a = pa, *b = pb;
    if (a->g != b->g)
        return a->g > b->g ? -1 : 1;
    if (a->c != b->c)
        return a->c > b->c ? -1 : 1;
    int s = strcmp(b->attrs, a->attrs);
    if (s)
        return s;
    if (a->gb != b->gb)
        return a->gb > b->gb ? -1 : 1;
    return (int)a->negative - (int)b->negative;
}

void migparted_layout_sort(struct migparted_layout *l)
{
    qsort(l->items, l->n, sizeof *l->items, layout_cmp);
}

bool migparted_layout_same(const struct migparted_layout *a, const struct migparted_layout *b)
{
    if (a->n != b->n)
        return false;
    struct migparted_layout x = *a, y = *b;
    migparted_layout_sort(&x);
    migparted_layout_sort(&y);
    for (unsigned i = 0; i < x.n; i++)
        if (!migparted_profile_same(&x.items[i], &y.items[i]))
            return false;
    return true;
}
