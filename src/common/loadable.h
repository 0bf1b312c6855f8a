/* Checks a shared library before dlopen maps it: the loader maps each segment from the file and
 * touches it, so one that runs past the end of a truncated file kills the process with SIGBUS
 * inside dlopen. Plain C, compiled into gpuscope and into libgpuscope-cupti.so (loadable.c),
 * which must never fail the process it is loaded into. */
#ifndef GPUSCOPE_COMMON_LOADABLE_H
#define GPUSCOPE_COMMON_LOADABLE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gs_lib_status {
	GS_LIB_OK = 0,
	GS_LIB_UNREADABLE = 1, /* cannot be opened (not there, no permission), or a directory */
	GS_LIB_DAMAGED = 2,    /* there, but not a whole ELF shared object of this machine */
	GS_LIB_NOT_LOADED = 3, /* passed the check; dlopen failed (dlerror in why) */
};

/* The file dlopen(name) maps: `name` itself when it has a '/', else the first found in
 * LD_LIBRARY_PATH, /etc/ld.so.cache and the default directories. 0, or -1 when none is. */
int gs_lib_resolve(const char *name, char *path, size_t path_len);

/* GS_LIB_OK when `path` is an ELF shared object of this machine whose program headers and
 * segments all lie within the file; else why ("PATH is truncated: segment 2 ends at ..."). */
enum gs_lib_status gs_lib_check(const char *path, char *why, size_t why_len);

/* dlopen of the file `name` resolves to, once it passes gs_lib_check. A bare name that is
 * already loaded is taken as it is; one not found where gs_lib_resolve looks is left to dlopen. */
enum gs_lib_status gs_dlopen_checked(const char *name, int flags, void **handle, char *why,
                                     size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
