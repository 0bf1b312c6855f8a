/* libgpuscope-cupti.so: a CUDA injection library (CUDA_INJECTION64_PATH). It turns CUPTI's
 * activity records (kernels, copies, memsets, synchronization, launch calls) into compact
 * gs_gt_records and hands each batch to gpuscope_cupti_buffer(), which gpuscope probes with
 * one uprobe. CUPTI is dlopened, found the way the process's CUDA was, so that the library
 * loads everywhere and never makes the process fail. What is recorded is what the gpuscope
 * clients ask for in gpuscope_cupti_control (gputime.h): exact, exact with launch calls, or a
 * duty cycle. While none asks, CUPTI's activity stays off and the only work is one thread
 * reading the control word every GPUSCOPE_CUPTI_FLUSH_MS. */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/loadable.h"
#include "gputime/gputime.h"

#define GS_EXPORT __attribute__((visibility("default")))

GS_EXPORT volatile struct gs_gt_control gpuscope_cupti_control = {
    .magic = GS_GT_MAGIC, .version = GS_GT_CONTROL_VERSION, .clients = GS_GT_CLIENTS};

/* The hand-off points gpuscope probes. The asm keeps each call and keeps the two bodies
 * apart (identical-code folding would make one symbol fire for both). */
GS_EXPORT __attribute__((noinline)) void gpuscope_cupti_buffer(const struct gs_gt_record *recs, uint32_t n,
                                                               const struct gs_gt_batch *batch) {
  __asm__ volatile("# gpuscope_cupti_buffer" ::"r"(recs), "r"(n), "r"(batch) : "memory");
}

GS_EXPORT __attribute__((noinline)) void gpuscope_cupti_name(uint32_t id, const char *name, uint32_t len) {
  __asm__ volatile("# gpuscope_cupti_name" ::"r"(id), "r"(name), "r"(len) : "memory");
}

static struct {
  __typeof__(&cuptiGetVersion) getVersion;
  __typeof__(&cuptiGetResultString) resultString;
  __typeof__(&cuptiActivityEnable) enable;
  __typeof__(&cuptiActivityDisable) disable;
  __typeof__(&cuptiActivityRegisterCallbacks) registerCallbacks;
  __typeof__(&cuptiActivityGetNextRecord) nextRecord;
  __typeof__(&cuptiActivityFlushAll) flushAll;
  __typeof__(&cuptiActivityRegisterTimestampCallback) timestampCallback;
  __typeof__(&cuptiGetTimestamp) getTimestamp;
  __typeof__(&cuptiSetThreadIdType) setThreadIdType;
  __typeof__(&cuptiActivityEnableRuntimeApi) enableRuntimeApi;
  __typeof__(&cuptiActivityEnableDriverApi) enableDriverApi;
  __typeof__(&cuptiActivityGetNumDroppedRecords) numDropped;
  __typeof__(&cuptiSubscribe) subscribe;
  __typeof__(&cuptiEnableCallback) enableCallback;
  __typeof__(&cuptiFinalize) finalize;
} cu;

#define BUF_BYTES (1u << 20)
#define BUF_MAX 32 /* bounded: CUPTI drops (and counts) records when all are in use */
#define NAMES_MAX 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *free_bufs[BUF_MAX];
static unsigned n_free, n_bufs;
static struct gs_gt_record batch[GS_GT_BATCH_MAX];
static unsigned batch_n;
static struct gs_gt_batch batch_hdr = {.version = GS_GT_VERSION};
static uint32_t handed_gen[GS_GT_CLIENTS + 1]; /* per slot (and v1's attached): generation given the names */
static int keep_boottime;                      /* CUPTI stamps records with CLOCK_BOOTTIME through our callback */
static int enabled, api_on, always, api_records = 1;
/* GPUSCOPE_CUPTI_API_CALLBACKS: 1 makes launch-call records from callbacks even when CUPTI is
 * set up at injection, 0 never (unset: only when set up late). */
static int callbacks_mode = -1;
static volatile int watched; /* some client is attached: records and names are handed over */
static uint32_t share_ppm;   /* of the records being recorded now (gs_gt_batch.share_ppm) */
static unsigned flush_ms = 100;

struct name_entry {
  const char *ptr; /* CUPTI's string: shared by every record of the kernel, lives on */
  char *copy;
  uint32_t len;
  uint64_t count, total_ns; /* GPUSCOPE_CUPTI_SUMMARY */
};
static struct name_entry *names; /* index = id - 1 */
static uint32_t n_names;
static uint32_t *by_ptr; /* open addressing, 2 * NAMES_MAX slots of id */
static const char *summary_path;

static void say(const char *fmt, const char *arg) {
  fprintf(stderr, "gpuscope-cupti: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
}

static uint64_t boottime_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_BOOTTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t CUPTIAPI cupti_timestamp(void) { return boottime_ns(); }

static int64_t clock_offset(void) {
  uint64_t c = 0;
  if (keep_boottime || !cu.getTimestamp || cu.getTimestamp(&c) != CUPTI_SUCCESS) return 0;
  return (int64_t)(c - boottime_ns());
}

static void hand_off(void) {
  if (!batch_n) return;
  if (watched || always) {
    batch_hdr.clock_offset_ns = clock_offset();
    batch_hdr.share_ppm = share_ppm;
    gpuscope_cupti_buffer(batch, batch_n, &batch_hdr);
    gpuscope_cupti_control.records_handed += batch_n;
  }
  batch_n = 0;
}

/* A client with a new generation gets the whole name table. Called with the lock held. */
static void hand_names(void) {
  int fresh = 0;
  for (int i = 0; i <= GS_GT_CLIENTS; i++) {
    uint32_t gen = i < GS_GT_CLIENTS ? gpuscope_cupti_control.client[i].generation : gpuscope_cupti_control.attached;
    if (gen != handed_gen[i]) fresh |= gen != 0;
    handed_gen[i] = gen;
  }
  if (!fresh) return;
  for (uint32_t i = 0; i < n_names; i++) gpuscope_cupti_name(i + 1, names[i].copy, names[i].len);
  gpuscope_cupti_control.names_handed += n_names;
}

static uint32_t name_id(const char *s) {
  if (!s) return 0;
  if (!names) {
    names = calloc(NAMES_MAX, sizeof *names);
    by_ptr = calloc(2 * NAMES_MAX, sizeof *by_ptr);
    if (!names || !by_ptr) return 0;
  }
  uintptr_t h = ((uintptr_t)s >> 3) * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = 0; i < 2 * NAMES_MAX; i++) {
    uint32_t *slot = &by_ptr[(h + i) % (2 * NAMES_MAX)];
    if (*slot && names[*slot - 1].ptr == s) return *slot;
    if (*slot) continue;
    if (n_names >= NAMES_MAX) {
      batch_hdr.lib_dropped++; /* the record stays, unnamed */
      return 0;
    }
    struct name_entry *e = &names[n_names];
    e->ptr = s;
    e->len = (uint32_t)strnlen(s, GS_GT_NAME_MAX - 1);
    e->copy = strndup(s, e->len);
    if (!e->copy) return 0;
    *slot = ++n_names;
    if (watched || always) gpuscope_cupti_name(*slot, e->copy, e->len);
    return *slot;
  }
  return 0;
}

/* The fields that CUPTI's kernel, memcpy, memset and synchronization records share by name. */
#define fill_span(r, x, kind_)             \
  do {                                     \
    (r)->kind = (kind_);                   \
    (r)->start_ns = (x)->start;            \
    (r)->end_ns = (x)->end;                \
    (r)->context = (x)->contextId;         \
    (r)->stream = (x)->streamId;           \
    (r)->correlation = (x)->correlationId; \
  } while (0)

/* A forced flush hands over records of work still running, without their end: counted, not kept. */
#define incomplete(x) ((x)->start == 0 || (x)->end < (x)->start)

static struct gs_gt_record *next_slot(void) {
  if (batch_n == GS_GT_BATCH_MAX) hand_off();
  struct gs_gt_record *r = &batch[batch_n++];
  memset(r, 0, sizeof *r);
  return r;
}

static void convert(const CUpti_Activity *a) {
  struct gs_gt_record *r;
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const void *)a;
      if (incomplete(k)) {
        batch_hdr.lib_dropped++;
        break;
      }
      uint32_t id = name_id(k->name);
      r = next_slot();
      fill_span(r, k, GS_GT_KERNEL);
      r->device = k->deviceId;
      r->name_id = id;
      r->grid[0] = (uint32_t)k->gridX, r->grid[1] = (uint32_t)k->gridY, r->grid[2] = (uint32_t)k->gridZ;
      r->block[0] = (uint32_t)k->blockX, r->block[1] = (uint32_t)k->blockY, r->block[2] = (uint32_t)k->blockZ;
      if (summary_path && id && k->end > k->start) {
        names[id - 1].count++;
        names[id - 1].total_ns += k->end - k->start;
      }
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const void *)a;
      if (incomplete(m)) {
        batch_hdr.lib_dropped++;
        break;
      }
      r = next_slot();
      fill_span(r, m, GS_GT_MEMCPY);
      r->sub_kind = m->copyKind;
      r->bytes = m->bytes;
      r->device = m->deviceId;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const void *)a;
      if (incomplete(m)) {
        batch_hdr.lib_dropped++;
        break;
      }
      r = next_slot();
      fill_span(r, m, GS_GT_MEMSET);
      r->bytes = m->bytes;
      r->device = m->deviceId;
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const CUpti_ActivitySynchronization2 *s = (const void *)a;
      if (incomplete(s)) {
        batch_hdr.lib_dropped++;
        break;
      }
      r = next_slot();
      fill_span(r, s, GS_GT_SYNC);
      r->sub_kind = (uint8_t)s->type;
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const CUpti_ActivityAPI *c = (const void *)a;
      r = next_slot();
      r->kind = GS_GT_API;
      r->sub_kind = a->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? 1 : 2;
      r->start_ns = c->start;
      r->end_ns = c->end;
      r->correlation = c->correlationId;
      r->name_id = c->cbid;
      r->tid = c->threadId;
      break;
    }
    default: break;
  }
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *max_records = 0;
  pthread_mutex_lock(&lock);
  uint8_t *b = n_free ? free_bufs[--n_free] : NULL;
  if (!b && n_bufs < BUF_MAX && (b = aligned_alloc(8, BUF_BYTES))) n_bufs++;
  pthread_mutex_unlock(&lock);
  *buffer = b;
  *size = b ? BUF_BYTES : 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)size;
  size_t dropped = 0;
  pthread_mutex_lock(&lock);
  if (cu.numDropped && cu.numDropped(ctx, stream, &dropped) == CUPTI_SUCCESS) batch_hdr.cupti_dropped += dropped;
  hand_names();
  CUpti_Activity *rec = NULL;
  while (cu.nextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) convert(rec);
  hand_off();
  if (n_free < BUF_MAX)
    free_bufs[n_free++] = buffer;
  else
    free(buffer);
  pthread_mutex_unlock(&lock);
}

/* Kernels always; copies, memsets and synchronizations only for a timeline, which draws them:
 * each kind enabled costs the process on every call of its kind. */
static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
/* Launch calls only, for the arrows from a launch to its kernel: every API would cost a
 * record per call. */
static const CUpti_CallbackId runtime_launches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
};
static const CUpti_CallbackId driver_launches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
};

/* CUPTI is set up when something is first recorded: a process nobody watches never has it
 * initialized; and again after a duty cycle's window detached it. 0 when CUPTI refuses (said
 * once). */
static int cupti_state; /* 0 not set up, 1 ready, -1 refused */
static int injecting;   /* inside InitializeInjection: the process's CUDA is only starting */
static int late;        /* CUPTI was set up after the process's CUDA started */
static pthread_mutex_t detach_lock = PTHREAD_MUTEX_INITIALIZER;
static int detach_pending; /* a window ended: the next launch's exit detaches CUPTI */
static int kinds_on;       /* how many of kinds[] are enabled */

static int set_up(void) {
  if (cupti_state) return cupti_state > 0;
  CUptiResult rc = cu.registerCallbacks(buffer_requested, buffer_completed);
  if (rc != CUPTI_SUCCESS) {
    const char *why = "?";
    if (cu.resultString) cu.resultString(rc, &why);
    say("CUPTI refused its buffers (%s); GPU activity is not recorded", why);
    cupti_state = -1;
    return 0;
  }
  keep_boottime = cu.timestampCallback && cu.timestampCallback(cupti_timestamp) == CUPTI_SUCCESS;
  if (cu.setThreadIdType) cu.setThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  cupti_state = 1;
  late = !injecting;
  return 1;
}

static int in_list(CUpti_CallbackId id, const CUpti_CallbackId *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (list[i] == id) return 1;
  return 0;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Launch-call records on or off. With GPUSCOPE_CUPTI_API_KINDS=1, through the whole API kinds
 * with every other call turned off one by one (CUPTI's other documented way). */
static void set_api_records(int on) {
  CUptiResult rc = CUPTI_SUCCESS, r;
  const char *k = getenv("GPUSCOPE_CUPTI_API_KINDS");
  if (k && !strcmp(k, "1")) {
    if ((r = (on ? cu.enable : cu.disable)(CUPTI_ACTIVITY_KIND_RUNTIME)) != CUPTI_SUCCESS) rc = r;
    if ((r = (on ? cu.enable : cu.disable)(CUPTI_ACTIVITY_KIND_DRIVER)) != CUPTI_SUCCESS) rc = r;
    for (CUpti_CallbackId id = 1; on && id < CUPTI_RUNTIME_TRACE_CBID_SIZE; id++)
      if (!in_list(id, runtime_launches, N_OF(runtime_launches))) cu.enableRuntimeApi(id, 0);
    for (CUpti_CallbackId id = 1; on && id < CUPTI_DRIVER_TRACE_CBID_SIZE; id++)
      if (!in_list(id, driver_launches, N_OF(driver_launches))) cu.enableDriverApi(id, 0);
  } else {
    for (size_t i = 0; i < N_OF(runtime_launches); i++)
      if ((r = cu.enableRuntimeApi(runtime_launches[i], (uint8_t)on)) != CUPTI_SUCCESS) rc = r;
    for (size_t i = 0; i < N_OF(driver_launches); i++)
      if ((r = cu.enableDriverApi(driver_launches[i], (uint8_t)on)) != CUPTI_SUCCESS) rc = r;
  }
  static int said;
  if (rc != CUPTI_SUCCESS && !said++) {
    const char *why = "?";
    if (cu.resultString) cu.resultString(rc, &why);
    say("CUPTI refused launch-call records (%s): a timeline draws no launch arrows", why);
  }
}

static void set_launch_callbacks(int on);

static int set_recording(int on, int full) {
  if (on && !set_up()) return 0;
  /* Launch records before kernels: a launch made as the kernels' kind goes on then has both. */
  int api = on && full && api_records;
  if (api != api_on) {
    if (cu.enableRuntimeApi && cu.enableDriverApi) set_api_records(api);
    if (callbacks_mode == 1 || (callbacks_mode < 0 && late)) set_launch_callbacks(api);
  }
  api_on = api;
  int want = !on ? 0 : full ? (int)(sizeof kinds / sizeof kinds[0]) : 1;
  for (int i = 0; i < (int)(sizeof kinds / sizeof kinds[0]); i++)
    if ((i < want) != (i < kinds_on)) (i < want ? cu.enable : cu.disable)(kinds[i]);
  kinds_on = want;
  enabled = on;
  return 1;
}

/* One subscriber, as CUPTI allows, for two jobs at the launch calls:
 * - launch-call records when CUPTI was set up after the process's CUDA started: CUPTI then gave
 *   no launch-call activity records on the H200 (0 of 38,702 kernels had one), while its
 *   callbacks run all the same. They are made beside the activity records (the timeline keeps
 *   one record per correlation id), so wherever CUPTI does give both, nothing is lost or doubled;
 * - detaching: once initialized, CUPTI costs every CUDA call of the process even with no
 *   activity enabled (measured on the H200: a duty cycle recording a tenth of the time cost as
 *   much as recording always). So after a window CUPTI is detached (cuptiFinalize), and set up
 *   again for the next. CUPTI wants that done at the exit of a CUDA call, so it is done at the
 *   exit of the process's next launch, on the thread that made it. */
static CUpti_SubscriberHandle sub;
static int cb_driver, cb_runtime;    /* launch callbacks enabled, by domain */
static int api_cb;                   /* launch-call records from the callbacks */
static __thread uint64_t entered[2]; /* a launch's entry time on this thread: driver, runtime */

static uint64_t now_stamp(void) {
  uint64_t t = 0;
  if (keep_boottime || !cu.getTimestamp || cu.getTimestamp(&t) != CUPTI_SUCCESS) return boottime_ns();
  return t; /* CUPTI's clock, as its records: clock_offset_ns converts both */
}

static void record_launch(int runtime, CUpti_CallbackId cbid, const CUpti_CallbackData *d) {
  if (d->callbackSite == CUPTI_API_ENTER) {
    entered[runtime] = now_stamp();
    return;
  }
  uint64_t start = entered[runtime], end = now_stamp();
  entered[runtime] = 0;
  if (!start) return; /* entered before the callbacks were on */
  pthread_mutex_lock(&lock);
  struct gs_gt_record *r = next_slot();
  r->kind = GS_GT_API;
  r->sub_kind = runtime ? 1 : 2;
  r->start_ns = start;
  r->end_ns = end;
  r->correlation = d->correlationId;
  r->name_id = cbid;
  r->tid = (uint32_t)syscall(SYS_gettid);
  pthread_mutex_unlock(&lock);
}

static void CUPTIAPI on_launch(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
  (void)userdata;
  const CUpti_CallbackData *d = data;
  if (__atomic_load_n(&api_cb, __ATOMIC_ACQUIRE)) record_launch(domain == CUPTI_CB_DOMAIN_RUNTIME_API, cbid, d);
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || d->callbackSite != CUPTI_API_EXIT ||
      !__atomic_exchange_n(&detach_pending, 0, __ATOMIC_ACQ_REL))
    return;
  pthread_mutex_lock(&detach_lock);
  cu.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (cu.finalize() == CUPTI_SUCCESS) {
    cupti_state = 0;
    kinds_on = 0;
    api_on = 0;
    __atomic_store_n(&api_cb, 0, __ATOMIC_RELEASE);
    sub = NULL; /* gone with CUPTI, and the callbacks with it */
    cb_driver = cb_runtime = 0;
  }
  pthread_mutex_unlock(&detach_lock);
}

/* The launch callbacks of each domain on or off; 0 when CUPTI refuses a subscriber (another tool
 * holds the one there is). */
static int set_callbacks(int driver, int runtime) {
  if ((driver || runtime) && !sub) {
    if (!cu.subscribe || !cu.enableCallback || cu.subscribe(&sub, on_launch, NULL) != CUPTI_SUCCESS) {
      sub = NULL;
      return 0;
    }
  }
  if (!sub) return 1;
  if (driver != cb_driver)
    for (size_t i = 0; i < N_OF(driver_launches); i++)
      cu.enableCallback((uint32_t)driver, sub, CUPTI_CB_DOMAIN_DRIVER_API, driver_launches[i]);
  if (runtime != cb_runtime)
    for (size_t i = 0; i < N_OF(runtime_launches); i++)
      cu.enableCallback((uint32_t)runtime, sub, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_launches[i]);
  cb_driver = driver;
  cb_runtime = runtime;
  return 1;
}

static void set_launch_callbacks(int on) {
  static int said;
  if (!set_callbacks(on || detach_pending, on) && !said++)
    say("%s", "CUPTI refused a subscriber (another tool holds it): launch arrows only where CUPTI gives records");
  __atomic_store_n(&api_cb, on && sub != NULL, __ATOMIC_RELEASE);
}

static void request_detach(void) {
  if (!cu.finalize || detach_pending || !set_callbacks(1, cb_runtime)) return;
  __atomic_store_n(&detach_pending, 1, __ATOMIC_RELEASE);
}

/* A window begins before any launch took the detach: CUPTI stays as it is, the callback
 * goes. */
static void cancel_detach(void) {
  if (__atomic_exchange_n(&detach_pending, 0, __ATOMIC_ACQ_REL)) set_callbacks(api_cb, api_cb);
}

/* What the clients want together, now. */
struct want {
  int watched, exact, api, window;
  uint32_t flush_mask; /* slots asking for a forced flush */
  uint32_t flush[GS_GT_CLIENTS];
  uint32_t share_ppm;    /* of the duty cycle, when not exact */
  uint64_t next_edge_ns; /* of the window, when a duty cycle runs */
};

static uint32_t lease_beat[GS_GT_CLIENTS], lease_gen[GS_GT_CLIENTS];
static uint64_t lease_ns[GS_GT_CLIENTS];

static struct want merge(uint64_t now) {
  volatile struct gs_gt_control *c = &gpuscope_cupti_control;
  struct want w = {0};
  uint64_t on = 0, period = 0;
  if (c->attached) w.watched = w.exact = w.api = 1;
  if (always) w.exact = w.api = 1;
  for (int i = 0; i < GS_GT_CLIENTS; i++) {
    volatile struct gs_gt_client *k = &c->client[i];
    uint32_t gen = k->generation, beat = k->beat;
    if (!gen) continue;
    if (gen != lease_gen[i] || beat != lease_beat[i]) {
      lease_gen[i] = gen;
      lease_beat[i] = beat;
      lease_ns[i] = now;
    } else if (now - lease_ns[i] > GS_GT_LEASE_MS * 1000000ull) {
      k->generation = 0; /* its gpuscope stopped beating: gone */
      continue;
    }
    w.watched = 1;
    uint32_t fl = k->flush;
    if (fl != k->flushed) w.flush_mask |= 1u << i, w.flush[i] = fl;
    uint32_t mode = k->mode, o = k->on_ms, p = k->period_ms;
    if (mode == GS_GT_MODE_DUTY && o && p && o < p) {
      if (!period || o * period > on * p) /* the largest share wins */
        on = o, period = p;
    } else if (mode != GS_GT_MODE_KERNELS && mode != GS_GT_MODE_DUTY) {
      w.exact = w.api = 1; /* a timeline, or a mode newer than this library: everything */
    } else {
      w.exact = 1;
    }
  }
  if (!w.exact && period) {
    uint64_t p = period * 1000000ull, o = on * 1000000ull, phase = now % p;
    w.window = phase < o;
    w.next_edge_ns = now - phase + (w.window ? o : p);
    w.share_ppm = (uint32_t)(on * 1000000ull / period);
  }
  return w;
}

static void *control_thread(void *arg) {
  (void)arg;
  volatile struct gs_gt_control *c = &gpuscope_cupti_control;
  for (;;) {
    uint64_t now = boottime_ns();
    struct want w = merge(now);
    int on = w.exact || w.window;
    uint32_t share = w.exact ? 0 : w.share_ppm;
    watched = w.watched;
    if (enabled && (!on || share != share_ppm)) {
      /* What was recorded goes out with the share it was recorded at. */
      if (!on) set_recording(0, 0);
      cu.flushAll(0);
      if (!on && w.next_edge_ns) request_detach();
    }
    if (on) {
      cancel_detach();
      pthread_mutex_lock(&detach_lock); /* a detach under way ends first */
      pthread_mutex_unlock(&detach_lock);
    }
    int was = enabled;
    pthread_mutex_lock(&lock);
    share_ppm = share;
    hand_names(); /* a new gpuscope gets the whole table, even with no new records */
    pthread_mutex_unlock(&lock);
    if (on && set_recording(1, w.api)) cu.flushAll(0);
    if (w.flush_mask && enabled) cu.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&lock);
    hand_off(); /* the launch records the callbacks made since */
    pthread_mutex_unlock(&lock);
    if (w.flush_mask) {
      for (int i = 0; i < GS_GT_CLIENTS; i++)
        if (w.flush_mask >> i & 1) c->client[i].flushed = w.flush[i];
    }
    if (enabled && !was && !w.exact) c->windows++;
    c->recording = !enabled ? GS_GT_REC_OFF : w.exact ? GS_GT_REC_EXACT : GS_GT_REC_WINDOW;
    c->api = (uint32_t)api_on;
    /* Next: the flush period, or the window's edge if sooner. */
    uint64_t next = now + flush_ms * 1000000ull;
    if (w.next_edge_ns && w.next_edge_ns < next) next = w.next_edge_ns;
    struct timespec t = {(time_t)(next / 1000000000ull), (long)(next % 1000000000ull)};
    while (clock_nanosleep(CLOCK_BOOTTIME, TIMER_ABSTIME, &t, NULL) == EINTR)
      ;
  }
  return NULL;
}

/* Names as gpuscope shows them, where the process has a C++ runtime to demangle with. */
typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static void write_summary(void) {
  FILE *f = fopen(summary_path, "w");
  if (!f) return;
  demangle_fn demangle = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
  pthread_mutex_lock(&lock);
  for (uint32_t i = 0; i < n_names; i++) {
    if (!names[i].count) continue;
    int status = -1;
    char *d = demangle ? demangle(names[i].copy, NULL, NULL, &status) : NULL;
    fprintf(f, "%llu\t%llu\t%s\n", (unsigned long long)names[i].count, (unsigned long long)names[i].total_ns,
            d && status == 0 ? d : names[i].copy);
    free(d);
  }
  pthread_mutex_unlock(&lock);
  fclose(f);
}

static void at_exit(void) {
  if (enabled) cu.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (summary_path) write_summary();
}

/* Why the last damaged libcupti was passed over (a truncated copy would fault inside dlopen). */
static char refused[PATH_MAX + 128];

static void *try_open(const char *path) {
  void *h;
  char why[sizeof refused];
  enum gs_lib_status st = gs_dlopen_checked(path, RTLD_NOW | RTLD_LOCAL, &h, why, sizeof why);
  if (st == GS_LIB_DAMAGED) memcpy(refused, why, sizeof refused);
  return h && dlsym(h, "cuptiActivityEnable") ? h : NULL;
}

/* Beside the CUDA the process loaded: the toolkit keeps libcupti next to libcudart, CUDA 13
 * wheels in the same nvidia/cu13/lib, CUDA 12 wheels in nvidia/cuda_cupti/lib. */
struct search {
  void *handle;
};

static int try_beside(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct search *s = data;
  const char *name = info->dlpi_name;
  const char *base = name ? strrchr(name, '/') : NULL;
  if (!base || s->handle) return s->handle != NULL;
  if (strncmp(base + 1, "libcudart.so", 12) && strncmp(base + 1, "libcuda.so", 10) &&
      strncmp(base + 1, "libcublas", 9) && strncmp(base + 1, "libtorch_cuda", 13))
    return 0;
  static const char *rel[] = {"libcupti.so.13", "libcupti.so", "../../cuda_cupti/lib/libcupti.so.13",
                              "../../cu13/lib/libcupti.so.13", "../extras/CUPTI/lib64/libcupti.so.13"};
  char path[PATH_MAX];
  int dir = (int)(base - name);
  for (size_t i = 0; i < sizeof rel / sizeof rel[0] && !s->handle; i++) {
    if (snprintf(path, sizeof path, "%.*s/%s", dir, name, rel[i]) < (int)sizeof path) s->handle = try_open(path);
  }
  return s->handle != NULL;
}

static void *find_cupti(void) {
  const char *env = getenv("GPUSCOPE_CUPTI_PATH");
  if (env && *env) {
    char path[PATH_MAX];
    void *h = try_open(env);
    if (!h && snprintf(path, sizeof path, "%s/libcupti.so.13", env) < (int)sizeof path) h = try_open(path);
    return h;
  }
  struct search s = {NULL};
  dl_iterate_phdr(try_beside, &s);
  if (s.handle) return s.handle;
  static const char *fallback[] = {"libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13",
                                   "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"};
  for (size_t i = 0; i < sizeof fallback / sizeof fallback[0]; i++)
    if ((s.handle = try_open(fallback[i]))) return s.handle;
  return NULL;
}

#define LOAD(field, sym) (cu.field = (__typeof__(cu.field))dlsym(h, #sym))

static int started;

GS_EXPORT int InitializeInjection(void) {
  if (__atomic_exchange_n(&started, 1, __ATOMIC_SEQ_CST)) return 1;
  const char *v = getenv("GPUSCOPE_CUPTI_FLUSH_MS");
  if (v && *v) {
    long ms = strtol(v, NULL, 10);
    flush_ms = ms >= 1 && ms <= 60000 ? (unsigned)ms : flush_ms;
  }
  always = getenv("GPUSCOPE_CUPTI_ALWAYS") && atoi(getenv("GPUSCOPE_CUPTI_ALWAYS")) == 1;
  api_records = !(getenv("GPUSCOPE_CUPTI_API") && atoi(getenv("GPUSCOPE_CUPTI_API")) == 0);
  summary_path = getenv("GPUSCOPE_CUPTI_SUMMARY");
  void *h = find_cupti();
  if (!h) {
    const char *env = getenv("GPUSCOPE_CUPTI_PATH");
    if (refused[0])
      say("%s; GPU activity is not recorded", refused);
    else if (env && *env)
      say("GPUSCOPE_CUPTI_PATH=%s holds no libcupti; GPU activity is not recorded", env);
    else
      say("%s", "no libcupti found (set GPUSCOPE_CUPTI_PATH); GPU activity is not recorded");
    return 1;
  }
  LOAD(getVersion, cuptiGetVersion);
  LOAD(resultString, cuptiGetResultString);
  LOAD(enable, cuptiActivityEnable);
  LOAD(disable, cuptiActivityDisable);
  LOAD(registerCallbacks, cuptiActivityRegisterCallbacks);
  LOAD(nextRecord, cuptiActivityGetNextRecord);
  LOAD(flushAll, cuptiActivityFlushAll);
  LOAD(timestampCallback, cuptiActivityRegisterTimestampCallback);
  LOAD(getTimestamp, cuptiGetTimestamp);
  LOAD(setThreadIdType, cuptiSetThreadIdType);
  LOAD(enableRuntimeApi, cuptiActivityEnableRuntimeApi);
  LOAD(enableDriverApi, cuptiActivityEnableDriverApi);
  LOAD(numDropped, cuptiActivityGetNumDroppedRecords);
  LOAD(subscribe, cuptiSubscribe);
  LOAD(enableCallback, cuptiEnableCallback);
  LOAD(finalize, cuptiFinalize);
  uint32_t version = 0;
  if (!cu.getVersion || !cu.enable || !cu.disable || !cu.registerCallbacks || !cu.nextRecord || !cu.flushAll ||
      cu.getVersion(&version) != CUPTI_SUCCESS) {
    say("%s", "libcupti lacks the activity API; GPU activity is not recorded");
    return 1;
  }
  /* The record layouts compiled in (CUpti_ActivityKernel10, ...) are those of CUDA 13. */
  if (version / 10000 != CUPTI_API_VERSION / 10000) {
    char msg[64];
    snprintf(msg, sizeof msg, "%u (built for %u)", version, CUPTI_API_VERSION);
    say("CUPTI API version %s; GPU activity is not recorded", msg);
    return 1;
  }
  const char *cb = getenv("GPUSCOPE_CUPTI_API_CALLBACKS");
  if (cb && *cb) callbacks_mode = atoi(cb) == 1;
  injecting = 1;
  int ok = !always || set_recording(1, 1);
  injecting = 0;
  if (!ok) return 1;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &attr, control_thread, NULL) != 0) {
    say("%s", "cannot start its thread; GPU activity is not recorded");
    if (always) set_recording(0, 0);
    return 1;
  }
  pthread_setname_np(t, "gpuscope-cupti");
  atexit(at_exit);
  return 1;
}
