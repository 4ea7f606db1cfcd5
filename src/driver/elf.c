/* The one ELF fact gpulet needs: a shared library's soname, the name the
 * dynamic linker looks for (libcuda.so.1 for libcuda.so.580.159.04). Read
 * from the program headers and the dynamic segment, a few hundred bytes,
 * however large the library. Also the writer of the tiny stand-in libraries
 * the simulator's driver tree holds, so the two agree on the format. */
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "driver/driver.h"

#define ELF_MAX_PHDRS 64
#define ELF_MAX_DYN 512

static bool elf_read(driver_read_fn read_at, void *ctx, uint64_t off, void *buf, size_t len)
{
    return read_at(ctx, off, buf, len) == len;
}

/* The file offset of virtual address v, through the PT_LOAD segments. */
static bool elf_offset(const Elf64_Phdr *ph, unsigned n, uint64_t v, uint64_t *off)
{
    for (unsigned i = 0; i < n; i++)
        if (ph[i].p_type == PT_LOAD && v >= ph[i].p_vaddr && v - ph[i].p_vaddr < ph[i].p_filesz) {
            *off = ph[i].p_offset + (v - ph[i].p_vaddr);
            return true;
        }
    return false;
}

int driver_elf_soname(driver_read_fn read_at, void *ctx, char *out, size_t len)
{
    Elf64_Ehdr eh;
    if (!elf_read(read_at, ctx, 0, &eh, sizeof eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > ELF_MAX_PHDRS)
        return -1;
    Elf64_Phdr ph[ELF_MAX_PHDRS];
    if (!elf_read(read_at, ctx, eh.e_phoff, ph, eh.e_phnum * sizeof *ph))
        return -1;
    const Elf64_Phdr *dyn = NULL;
    for (unsigned i = 0; i < eh.e_phnum && !dyn; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            dyn = &ph[i];
    if (!dyn)
        return -1;
    uint64_t count = dyn->p_filesz / sizeof(Elf64_Dyn);
    if (count > ELF_MAX_DYN)
        count = ELF_MAX_DYN;
    Elf64_Dyn d[ELF_MAX_DYN];
    if (count == 0 || !elf_read(read_at, ctx, dyn->p_offset, d, count * sizeof *d))
        return -1;
    uint64_t strtab = 0, soname = UINT64_MAX;
    bool have_strtab = false;
    for (uint64_t i = 0; i < count && d[i].d_tag != DT_NULL; i++) {
        if (d[i].d_tag == DT_STRTAB)
            strtab = d[i].d_un.d_ptr, have_strtab = true;
        else if (d[i].d_tag == DT_SONAME)
            soname = d[i].d_un.d_val;
    }
    uint64_t off;
    if (!have_strtab || soname == UINT64_MAX || !elf_offset(ph, eh.e_phnum, strtab, &off) ||
        off + soname < off || len < 2)
        return -1;
    size_t got = read_at(ctx, off + soname, out, len - 1);
    out[got] = '\0';
    size_t n = strnlen(out, got);
    if (n == 0 || n == got) /* empty, or longer than out */
        return -1;
    return 0;
}

static size_t elf_pread(void *ctx, uint64_t off, void *buf, size_t len)
{
    ssize_t r = pread(*(int *)ctx, buf, len, (off_t)off);
    return r < 0 ? 0 : (size_t)r;
}

int driver_file_soname(const char *path, char *out, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = driver_elf_soname(elf_pread, &fd, out, len);
    close(fd);
    return rc;
}

/* ELF header, a PT_LOAD over the whole file, PT_DYNAMIC, the dynamic
 * entries (with the libraries it needs, which the loader then loads too),
 * an empty symbol table and its hash table, then the string table:
 * enough for glibc's dlopen, so a test can follow the loader's
 * own search to it. The segment is writable because the loader rewrites
 * the dynamic entries' addresses in place. */
struct elf_stub {
    Elf64_Ehdr eh;
    Elf64_Phdr ph[2];
    Elf64_Dyn dyn[6 + DRIVER_STUB_NEEDED_MAX + 1]; /* DT_NULL ends them */
    Elf64_Sym sym[1];
    Elf32_Word hash[4]; /* nbucket 1, nchain 1, the bucket, the chain: all empty */
    char strtab[256];
};

#if defined(__aarch64__)
#define ELF_STUB_MACHINE EM_AARCH64
#else
#define ELF_STUB_MACHINE EM_X86_64
#endif

int driver_write_stub_elf(const char *path, const char *soname, const char *const *needed,
                          struct err *e)
{
    struct elf_stub s;
    memset(&s, 0, sizeof s);
    size_t used = 1 + strlen(soname) + 1;
    if (used > sizeof s.strtab)
        return err_set(e, "soname too long: %s", soname);
    memcpy(s.strtab + 1, soname, strlen(soname));
    unsigned ndyn = 6;
    for (unsigned i = 0; needed && needed[i]; i++) {
        size_t n = strlen(needed[i]) + 1;
        if (i == DRIVER_STUB_NEEDED_MAX || used + n > sizeof s.strtab)
            return err_set(e, "%s: too many needed libraries", soname);
        memcpy(s.strtab + used, needed[i], n);
        s.dyn[ndyn++] = (Elf64_Dyn){.d_tag = DT_NEEDED, .d_un.d_val = used};
        used += n;
    }
    memcpy(s.eh.e_ident, ELFMAG, SELFMAG);
    s.eh.e_ident[EI_CLASS] = ELFCLASS64;
    s.eh.e_ident[EI_DATA] = ELFDATA2LSB;
    s.eh.e_ident[EI_VERSION] = EV_CURRENT;
    s.eh.e_type = ET_DYN;
    s.eh.e_machine = ELF_STUB_MACHINE;
    s.eh.e_version = EV_CURRENT;
    s.eh.e_phoff = offsetof(struct elf_stub, ph);
    s.eh.e_ehsize = sizeof s.eh;
    s.eh.e_phentsize = sizeof s.ph[0];
    s.eh.e_phnum = 2;
    s.ph[0] = (Elf64_Phdr){.p_type = PT_LOAD, .p_flags = PF_R | PF_W, .p_filesz = sizeof s,
                           .p_memsz = sizeof s, .p_align = 4096};
    s.ph[1] = (Elf64_Phdr){.p_type = PT_DYNAMIC, .p_flags = PF_R,
                           .p_offset = offsetof(struct elf_stub, dyn),
                           .p_vaddr = offsetof(struct elf_stub, dyn), .p_filesz = sizeof s.dyn,
                           .p_memsz = sizeof s.dyn, .p_align = 8};
    s.dyn[0] = (Elf64_Dyn){.d_tag = DT_STRTAB, .d_un.d_ptr = offsetof(struct elf_stub, strtab)};
    s.dyn[1] = (Elf64_Dyn){.d_tag = DT_SONAME, .d_un.d_val = 1};
    s.dyn[2] = (Elf64_Dyn){.d_tag = DT_SYMTAB, .d_un.d_ptr = offsetof(struct elf_stub, sym)};
    s.dyn[3] = (Elf64_Dyn){.d_tag = DT_SYMENT, .d_un.d_val = sizeof s.sym[0]};
    s.dyn[4] = (Elf64_Dyn){.d_tag = DT_HASH, .d_un.d_ptr = offsetof(struct elf_stub, hash)};
    s.dyn[5] = (Elf64_Dyn){.d_tag = DT_STRSZ, .d_un.d_val = sizeof s.strtab};
    s.hash[0] = s.hash[1] = 1;
    FILE *f = fopen(path, "wb");
    if (!f)
        return err_set(e, "cannot write %s: %m", path);
    bool ok = fwrite(&s, sizeof s, 1, f) == 1;
    if (fclose(f) != 0 || !ok)
        return err_set(e, "cannot write %s: %m", path);
    return 0;
}
