#define _GNU_SOURCE
#include "common/loadable.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#define GS_EM EM_X86_64
#define GS_ARCH "x86-64"
#define GS_CACHE_ID 0x0303 /* ld.so.cache: FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 */
#define GS_MULTIARCH "x86_64-linux-gnu"
#elif defined(__aarch64__)
#define GS_EM EM_AARCH64
#define GS_ARCH "AArch64"
#define GS_CACHE_ID 0x0a03 /* FLAG_ELF_LIBC6 | FLAG_AARCH64_LIB64 */
#define GS_MULTIARCH "aarch64-linux-gnu"
#else
#error "loadable.c: an unknown architecture"
#endif

static enum gs_lib_status say(enum gs_lib_status st, char *why, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (len)
		vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return st;
}

static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
	return pread(fd, buf, n, (off_t)off) == (ssize_t)n;
}

static enum gs_lib_status check_fd(int fd, const char *path, char *why, size_t len)
{
	struct stat st;
	if (fstat(fd, &st) == 0 &&
	    S_ISDIR(st.st_mode)) /* a directory holds no library: as if none were there */
		return say(GS_LIB_UNREADABLE, why, len, "%s is a directory", path);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return say(GS_LIB_DAMAGED, why, len, "%s is not a regular file", path);
	uint64_t size = (uint64_t)st.st_size;
	Elf64_Ehdr eh;
	if (!read_at(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
		return say(GS_LIB_DAMAGED, why, len, "%s is not an ELF shared object", path);
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh.e_machine != GS_EM || eh.e_type != ET_DYN)
		return say(GS_LIB_DAMAGED, why, len, "%s is not an %s ELF shared object", path,
		           GS_ARCH);
	if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phoff > size ||
	    (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > size - eh.e_phoff)
		return say(GS_LIB_DAMAGED, why, len,
		           "%s is truncated or damaged: its program headers are not within its "
		           "%llu bytes",
		           path, (unsigned long long)size);
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		if (!read_at(fd, &ph, sizeof ph, eh.e_phoff + (uint64_t)i * sizeof ph))
			return say(GS_LIB_DAMAGED, why, len, "%s cannot be read", path);
		if (ph.p_filesz && (ph.p_offset > size || ph.p_filesz > size - ph.p_offset))
			return say(
			        GS_LIB_DAMAGED, why, len,
			        "%s is truncated: segment %u ends at byte %llu, the file has %llu",
			        path, i, (unsigned long long)(ph.p_offset + ph.p_filesz),
			        (unsigned long long)size);
	}
	return GS_LIB_OK;
}

enum gs_lib_status gs_lib_check(const char *path, char *why, size_t why_len)
{
	/* Non-blocking: a FIFO named as a library would hold the open until a writer came. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return say(GS_LIB_UNREADABLE, why, why_len, "%s cannot be opened: %s", path,
		           strerror(errno));
	enum gs_lib_status st = check_fd(fd, path, why, why_len);
	close(fd);
	return st;
}

static int found_in(const char *dir, size_t dir_len, const char *name, char *path, size_t path_len)
{
	struct stat st;
	int n = dir_len ? snprintf(path, path_len, "%.*s/%s", (int)dir_len, dir, name)
	                : snprintf(path, path_len, "%s", name);
	return n > 0 && (size_t)n < path_len && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The whole of /etc/ld.so.cache, read rather than mapped: a cache cut short must not fault. */
static char *read_cache(size_t *size)
{
	int fd = open("/etc/ld.so.cache", O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size < (64 << 20) &&
	    (buf = malloc((size_t)st.st_size)) && !read_at(fd, buf, (size_t)st.st_size, 0)) {
		free(buf);
		buf = NULL;
	}
	close(fd);
	*size = buf ? (size_t)st.st_size : 0;
	return buf;
}

/* glibc's format since 2.32 ("glibc-ld.so.cache1.1"), alone or after the old one. */
static int in_cache(const char *name, char *path, size_t path_len)
{
	static const char old_magic[] = "ld.so-1.7.0", new_magic[] = "glibc-ld.so.cache1.1";
	size_t size, at = 0;
	char *c = read_cache(&size);
	int found = 0;
	if (!c)
		return 0;
	if (size >= 16 && memcmp(c, old_magic, sizeof old_magic - 1) == 0) {
		uint32_t n_old;
		memcpy(&n_old, c + 12, sizeof n_old);
		at = (16 + (size_t)n_old * 12 + 7) & ~(size_t)7;
	}
	if (at <= size && size - at >= 48 && memcmp(c + at, new_magic, sizeof new_magic - 1) == 0) {
		const char *h = c + at;
		uint32_t n;
		memcpy(&n, h + 20, sizeof n);
		for (uint64_t i = 0; !found && i < n && 48 + (i + 1) * 24 <= size - at; i++) {
			struct {
				int32_t flags;
				uint32_t key, value, os;
				uint64_t hwcap;
			} e;
			memcpy(&e, h + 48 + i * 24, sizeof e);
			if (e.flags != GS_CACHE_ID || e.hwcap || e.key >= size - at ||
			    e.value >= size - at || !memchr(h + e.key, 0, size - at - e.key) ||
			    !memchr(h + e.value, 0, size - at - e.value) ||
			    strcmp(h + e.key, name) != 0)
				continue;
			found = found_in("", 0, h + e.value, path, path_len);
		}
	}
	free(c);
	return found;
}

int gs_lib_resolve(const char *name, char *path, size_t path_len)
{
	if (strchr(name, '/'))
		return found_in("", 0, name, path, path_len) ? 0 : -1;
	const char *lp = getenv("LD_LIBRARY_PATH");
	while (lp && *lp) {
		size_t n = strcspn(lp, ":;");
		if (found_in(n ? lp : ".", n ? n : 1, name, path, path_len))
			return 0;
		lp += n + (lp[n] != '\0');
	}
	if (in_cache(name, path, path_len))
		return 0;
	static const char *dirs[] = {"/lib/" GS_MULTIARCH,
	                             "/usr/lib/" GS_MULTIARCH,
	                             "/lib64",
	                             "/usr/lib64",
	                             "/lib",
	                             "/usr/lib"};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
		if (found_in(dirs[i], strlen(dirs[i]), name, path, path_len))
			return 0;
	return -1;
}

enum gs_lib_status gs_dlopen_checked(const char *name, int flags, void **handle, char *why,
                                     size_t why_len)
{
	char path[PATH_MAX];
	*handle = NULL;
	if (why_len)
		why[0] = '\0';
	if (!strchr(name, '/')) {
		if ((*handle = dlopen(name, flags | RTLD_NOLOAD)))
			return GS_LIB_OK;
		if (gs_lib_resolve(name, path, sizeof path) != 0) {
			if ((*handle = dlopen(name, flags)))
				return GS_LIB_OK;
			return say(GS_LIB_NOT_LOADED, why, why_len, "%s", dlerror());
		}
		name = path;
	}
	enum gs_lib_status st = gs_lib_check(name, why, why_len);
	if (st != GS_LIB_OK)
		return st;
	if (!(*handle = dlopen(name, flags)))
		return say(GS_LIB_NOT_LOADED, why, why_len, "%s", dlerror());
	return GS_LIB_OK;
}
