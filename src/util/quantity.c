/* Kubernetes quantities, parsed as resource.Quantity parses them: "8G" is
 * 8 x 10^9 bytes (7629 MiB), "8Gi" 8 x 2^30 (8192 MiB), a plain number is
 * bytes. */
#include "util/quantity.h"

#include <string.h>

/* Each suffix multiplies, or (milli) divides, so that the whole numbers
 * they make stay exact. */
static const struct {
    const char *suffix;
    long double mul, div;
} quantity_suffixes[] = {
    {"Ki", 1024.0L, 1},          {"Mi", 1048576.0L, 1},          {"Gi", 1073741824.0L, 1},
    {"Ti", 1099511627776.0L, 1}, {"Pi", 1125899906842624.0L, 1}, {"Ei", 1152921504606846976.0L, 1},
    {"m", 1, 1000},              {"", 1, 1},                     {"k", 1e3L, 1},
    {"M", 1e6L, 1},              {"G", 1e9L, 1},                 {"T", 1e12L, 1},
    {"P", 1e15L, 1},             {"E", 1e18L, 1},
};

/* Digits, at most one '.', at least one digit: the number's value, and
 * where it ends; NULL when there is none. */
static const char *quantity_number(const char *s, long double *v)
{
    long double x = 0, scale = 1;
    bool digits = false, point = false;
    for (; (*s >= '0' && *s <= '9') || (*s == '.' && !point); s++) {
        if (*s == '.') {
            point = true;
            continue;
        }
        digits = true;
        if (point)
            x += (long double)(*s - '0') * (scale /= 10);
        else
            x = x * 10 + (long double)(*s - '0');
    }
    *v = x;
    return digits ? s : NULL;
}

bool quantity_parse(const char *s, long double *value)
{
    if (!s)
        return false;
    long double sign = 1;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    long double v;
    const char *rest = quantity_number(s, &v);
    if (!rest)
        return false;
    for (size_t i = 0; i < sizeof quantity_suffixes / sizeof *quantity_suffixes; i++)
        if (!strcmp(rest, quantity_suffixes[i].suffix)) {
            *value = sign * v * quantity_suffixes[i].mul / quantity_suffixes[i].div;
            return true;
        }
    /* An exponent: e or E, then a signed integer (a lone E is exa, above). */
    if (*rest != 'e' && *rest != 'E')
        return false;
    const char *exp = rest + 1;
    long double esign = 1;
    if (*exp == '+' || *exp == '-')
        esign = *exp++ == '-' ? -1 : 1;
    if (!*exp || strspn(exp, "0123456789") != strlen(exp) || strlen(exp) > 3)
        return false;
    int e = 0;
    for (const char *p = exp; *p; p++)
        e = e * 10 + (*p - '0');
    for (int i = 0; i < e; i++) /* at most 999 steps; long double holds 10^4932 */
        v = esign > 0 ? v * 10 : v / 10;
    *value = sign * v;
    return true;
}

unsigned long long quantity_mib(const char *s)
{
    long double v;
    if (!quantity_parse(s, &v))
        return 0;
    long double mib = v / 1048576.0L;
    return mib >= 1 && mib <= 1125899906842624.0L ? (unsigned long long)mib : 0;
}
