/* gpuscope ioctl: map and event layouts shared by ioctl.bpf.c and userspace. */
#ifndef GPUSCOPE_IOCTL_H
#define GPUSCOPE_IOCTL_H
#ifdef __cplusplus
#include <linux/types.h>
#endif

#define GS_NV_MAJOR 195
#define GS_DRM_MAJOR 226     /* /dev/dri/card*, renderD* */
#define GS_KDEV_MINORBITS 20 /* the kernel's dev_t: major << 20 | minor */
/* DRM_IOCTL_VERSION: _IOWR('d', 0x00, struct drm_version), 64 bytes on 64-bit; its answer names
 * the device's kernel driver. Offsets of struct drm_version's name_len and name. */
#define GS_DRM_IOCTL_VERSION 0xC0406400u
#define GS_DRM_VERSION_NAME_LEN_OFF 16
#define GS_DRM_VERSION_NAME_OFF 24
#define GS_DRM_DRIVER_NAME_MAX 32

struct gs_ioctl_key {
	__u32 pid;
	__u32 rdev; /* kernel dev_t of the device node */
	__u32 request;
	__u32 pad;
};

struct gs_ioctl_val {
	__u64 count;
	__u64 errors;
	__u64 total_ns;
	__u64 max_ns;
	char comm
	        [16]; /* the caller's thread name when the entry was made: it outlives the process */
};

struct gs_mmap_key {
	__u32 pid;
	__u32 rdev;
};

struct gs_mmap_val {
	__u64 count;
	__u64 bytes;
	char comm[16];
};

/* Opens of an NVIDIA device node (openat, openat2) that returned an fd. */
struct gs_open_key {
	__u32 pid;
	__u32 rdev;
};

struct gs_open_val {
	__u64 count;
	__u64 first_boot_ns; /* CLOCK_BOOTTIME of the first open seen */
	char comm[16];
};

struct gs_ioctl_event {
	__u64 ts_boot_ns;
	__u64 dur_ns;
	__s64 ret;
	__u32 pid;
	__u32 tid;
	__u32 rdev;
	__u32 request;
	char comm[16];
};

/* A DRM device's kernel driver, as DRM_IOCTL_VERSION answered (keyed by the device's rdev). */
struct gs_drm_driver {
	char name[GS_DRM_DRIVER_NAME_MAX]; /* NUL-terminated, cut at 31 bytes */
};

enum gs_ioctl_drop {
	GS_IOCTL_DROP_STATE_FULL,
	GS_IOCTL_DROP_MAP_FULL,
	GS_IOCTL_DROP_RINGBUF,
	GS_IOCTL_DROP_COUNT
};

#ifdef __cplusplus
static_assert(sizeof(gs_ioctl_key) == 16);
static_assert(sizeof(gs_ioctl_val) == 48);
static_assert(sizeof(gs_mmap_val) == 32);
static_assert(sizeof(gs_mmap_key) == 8);
static_assert(sizeof(gs_ioctl_event) == 56);
static_assert(sizeof(gs_open_key) == 8);
static_assert(sizeof(gs_open_val) == 32);
static_assert(sizeof(gs_drm_driver) == GS_DRM_DRIVER_NAME_MAX, "the name alone, as BPF writes it");
#endif

#endif
