/* NVML backend of the device interface. Loads the driver's NVML library at run time with dlopen
 * ($EERL_NVML_LIBRARY, else libnvidia-ml.so.1, else libnvidia-ml.so), so eerl builds and runs on
 * machines without a driver and needs no nvml.h: the few NVML types, constants and prototypes it
 * uses are declared here, copied from NVML's documented ABI.
 *
 * It owns: the dlopen handle, one nvmlInit/nvmlShutdown pair per eerl_device, the cached GPU count
 * and per-GPU NVML handles. It must not touch clocks except when asked (only the actuator asks),
 * and it never prints: failures are returned as EERL_E* codes, with the NVML function, GPU, values
 * and nvmlErrorString() recorded through eerl__device_fail().
 *
 * Symbols: the _v2 names are preferred and the old names are the fallback (drivers export both
 * for years). A symbol without which nothing works is required (open fails with EERL_ENOSYM and
 * names it); the rest are optional and a missing one makes only its call fail with EERL_ENOTSUP.
 *
 * Threads: the meter samples from its own thread while the actuator may lock clocks from another;
 * NVML itself is thread-safe, and the lazily (re)fetched handles are guarded by a mutex. The
 * last-error text lives in eerl_device and is per handle (see device.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eerl/error.h"
#include "device/device_impl.h"

/* ---- the part of NVML's ABI eerl uses -------------------------------------------------------- */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_ALREADY_INITIALIZED 5
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_INSUFFICIENT_POWER 8
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_RESET_REQUIRED 16
#define NVML_ERROR_OPERATING_SYSTEM 17
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18
#define NVML_ERROR_IN_USE 19
#define NVML_ERROR_MEMORY 20
#define NVML_ERROR_NO_DATA 21
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23
#define NVML_ERROR_FREQ_NOT_SUPPORTED 24
#define NVML_ERROR_NOT_READY 27
#define NVML_ERROR_GPU_NOT_FOUND 28
#define NVML_ERROR_INVALID_STATE 29

#define NVML_CLOCK_SM 1 /* nvmlClockType_t */

/* nvmlDeviceGetFieldValues: nvmlFieldValue_t as nvml.h documents it (40 bytes). */
#define NVML_FI_DEV_POWER_INSTANT 186 /* current power in mW, not averaged */
typedef struct {
    unsigned int fieldId;
    unsigned int scopeId; /* for power fields, nvmlPowerScopeType_t: 0 = the GPU */
    long long timestamp;
    long long latencyUsec;
    int valueType; /* nvmlValueType_t */
    nvmlReturn_t nvmlReturn;
    union {
        double dVal;               /* NVML_VALUE_TYPE_DOUBLE 0 */
        unsigned int uiVal;        /* UNSIGNED_INT 1 */
        unsigned long ulVal;       /* UNSIGNED_LONG 2 */
        unsigned long long ullVal; /* UNSIGNED_LONG_LONG 3 */
        signed long long sllVal;   /* SIGNED_LONG_LONG 4 */
        int siVal;                 /* SIGNED_INT 5 */
        unsigned short usVal;      /* UNSIGNED_SHORT 6 */
    } value;
} nvmlFieldValue_t;

/* NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE are 96. */
#define NVML_STRING_BUFFER 96
#define NVML_MAX_MEM_CLOCKS 64

struct nvml_fns {
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*get_count)(unsigned int *);
    nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*get_name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*get_clock_info)(nvmlDevice_t, int, unsigned int *);
    nvmlReturn_t (*get_power)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*get_energy)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*get_mem_clocks)(nvmlDevice_t, unsigned int *, unsigned int *);
    nvmlReturn_t (*get_gr_clocks)(nvmlDevice_t, unsigned int, unsigned int *, unsigned int *);
    nvmlReturn_t (*get_reasons)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*lock)(nvmlDevice_t, unsigned int, unsigned int);
    nvmlReturn_t (*reset)(nvmlDevice_t);
    nvmlReturn_t (*get_field_values)(nvmlDevice_t, int, nvmlFieldValue_t *);
    nvmlReturn_t (*get_driver_version)(char *, unsigned int);
    nvmlReturn_t (*get_power_limit)(nvmlDevice_t, unsigned int *);
};

/* One row per function pointer: the names to try in order, and whether open needs it. */
struct sym {
    size_t offset;
    const char *names[2];
    int required;
};

#define FN(field) offsetof(struct nvml_fns, field)
static const struct sym syms[] = {
    {FN(init), {"nvmlInit_v2", "nvmlInit"}, 1},
    {FN(shutdown), {"nvmlShutdown", NULL}, 1},
    {FN(error_string), {"nvmlErrorString", NULL}, 1},
    {FN(get_count), {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, 1},
    {FN(get_handle), {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, 1},
    {FN(get_name), {"nvmlDeviceGetName", NULL}, 1},
    {FN(get_uuid), {"nvmlDeviceGetUUID", NULL}, 1},
    {FN(get_clock_info), {"nvmlDeviceGetClockInfo", NULL}, 1},
    {FN(get_power), {"nvmlDeviceGetPowerUsage", NULL}, 1},
    {FN(get_energy), {"nvmlDeviceGetTotalEnergyConsumption", NULL}, 0},
    {FN(get_mem_clocks), {"nvmlDeviceGetSupportedMemoryClocks", NULL}, 0},
    {FN(get_gr_clocks), {"nvmlDeviceGetSupportedGraphicsClocks", NULL}, 0},
    /* Renamed in CUDA 12.x drivers; the old name stays exported for compatibility. */
    {FN(get_reasons),
     {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
     0},
    {FN(lock), {"nvmlDeviceSetGpuLockedClocks", NULL}, 0},
    {FN(reset), {"nvmlDeviceResetGpuLockedClocks", NULL}, 0},
    {FN(get_field_values), {"nvmlDeviceGetFieldValues", NULL}, 0},
    {FN(get_driver_version), {"nvmlSystemGetDriverVersion", NULL}, 0},
    {FN(get_power_limit), {"nvmlDeviceGetEnforcedPowerLimit", NULL}, 0},
};
#undef FN

struct nvml {
    void *dl;
    char lib[256];                                    /* what was loaded, for messages */
    const char *used[sizeof(syms) / sizeof(syms[0])]; /* the name resolved per row, or NULL */
    struct nvml_fns f;
    unsigned count;
    pthread_mutex_t mu; /* guards handles */
    nvmlDevice_t *handles;
};

enum {
    S_INIT,
    S_SHUTDOWN,
    S_ERROR_STRING,
    S_COUNT,
    S_HANDLE,
    S_NAME,
    S_UUID,
    S_CLOCK_INFO,
    S_POWER,
    S_ENERGY,
    S_MEM_CLOCKS,
    S_GR_CLOCKS,
    S_REASONS,
    S_LOCK,
    S_RESET,
    S_FIELD_VALUES,
    S_DRIVER_VERSION,
    S_POWER_LIMIT
};

/* NVML status -> eerl code. Anything not listed is EERL_ENVML, with NVML's text in the detail. */
static int map_status(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return 0;
    case NVML_ERROR_UNINITIALIZED:
        return EERL_EUNINIT;
    case NVML_ERROR_INVALID_ARGUMENT:
        return EERL_EINVAL;
    case NVML_ERROR_NOT_SUPPORTED:
        return EERL_ENOTSUP;
    case NVML_ERROR_NO_PERMISSION:
        return EERL_ENOPERM;
    case NVML_ERROR_ALREADY_INITIALIZED:
    case NVML_ERROR_INVALID_STATE:
        return EERL_ESTATE;
    case NVML_ERROR_NOT_FOUND:
    case NVML_ERROR_GPU_NOT_FOUND:
        return EERL_ENODEV;
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return EERL_EOVERFLOW;
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_LIBRARY_NOT_FOUND:
        return EERL_ENODRIVER;
    case NVML_ERROR_TIMEOUT:
        return EERL_ETIMEDOUT;
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return EERL_ENOSYM;
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_RESET_REQUIRED:
        return EERL_EGPULOST;
    case NVML_ERROR_OPERATING_SYSTEM:
        return EERL_ESYS;
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return EERL_EVERSION;
    case NVML_ERROR_IN_USE:
    case NVML_ERROR_NOT_READY:
        return EERL_EBUSY;
    case NVML_ERROR_MEMORY:
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        return EERL_ENOMEM;
    case NVML_ERROR_NO_DATA:
        return EERL_ENODATA;
    case NVML_ERROR_FREQ_NOT_SUPPORTED:
        return EERL_ERANGE;
    default:
        return EERL_ENVML;
    }
}

static const char *nv_text(const struct nvml *nv, nvmlReturn_t r)
{
    const char *s = nv->f.error_string ? nv->f.error_string(r) : NULL;
    return s ? s : "unknown NVML status";
}

/* Records "<function> (gpu N<what>): <NVML text> (NVML status S)" and returns the mapped code. */
static int nv_fail(eerl_device *dev, int sym, unsigned gpu, const char *what, nvmlReturn_t r)
{
    struct nvml *nv = eerl__device_impl(dev);

    return eerl__device_fail(dev, map_status(r), "%s (gpu %u%s): %s (NVML status %d)",
                             nv->used[sym], gpu, what ? what : "", nv_text(nv, r), (int)r);
}

static int missing(eerl_device *dev, int sym, unsigned gpu)
{
    struct nvml *nv = eerl__device_impl(dev);

    return eerl__device_fail(dev, EERL_ENOTSUP,
                             "%s (gpu %u): %s does not export %s (driver too old)",
                             syms[sym].names[0], gpu, nv->lib, syms[sym].names[0]);
}

/* The NVML handle of a GPU, fetched again if an earlier fetch failed (a GPU that was briefly
 * unavailable at open must not stay unusable). */
static int handle(eerl_device *dev, unsigned gpu, nvmlDevice_t *ret_h)
{
    struct nvml *nv = eerl__device_impl(dev);
    nvmlDevice_t h = NULL;
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&nv->mu);
    h = nv->handles[gpu];
    if (!h) {
        r = nv->f.get_handle(gpu, &h);
        if (r == NVML_SUCCESS)
            nv->handles[gpu] = h;
    }
    pthread_mutex_unlock(&nv->mu);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, S_HANDLE, gpu, NULL, r);
    *ret_h = h;
    return 0;
}

static int op_count(eerl_device *dev, unsigned *ret_count)
{
    struct nvml *nv = eerl__device_impl(dev);

    *ret_count = nv->count;
    return 0;
}

static int get_string(eerl_device *dev, int sym, unsigned gpu, char *buf, size_t len)
{
    struct nvml *nv = eerl__device_impl(dev);
    char tmp[NVML_STRING_BUFFER + 1];
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    size_t n;
    int e = handle(dev, gpu, &h);

    if (e < 0)
        return e;
    memset(tmp, 0, sizeof(tmp));
    r = (sym == S_NAME ? nv->f.get_name : nv->f.get_uuid)(h, tmp, NVML_STRING_BUFFER);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, sym, gpu, NULL, r);
    n = strlen(tmp);
    if (n >= len)
        return eerl__device_fail(dev, EERL_EOVERFLOW, "%s (gpu %u): %zu bytes needed, room for %zu",
                                 nv->used[sym], gpu, n + 1, len);
    memcpy(buf, tmp, n + 1);
    return 0;
}

static int op_name(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    return get_string(dev, S_NAME, gpu, buf, len);
}

static int op_uuid(eerl_device *dev, unsigned gpu, char *buf, size_t len)
{
    return get_string(dev, S_UUID, gpu, buf, len);
}

static int cmp_desc(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x < y) - (x > y);
}

/* SM clocks at the highest memory clock: that is where the clock choice matters for RL work
 * (the memory clock stays at its top under the default governor). */
static int op_supported_sm_clocks(eerl_device *dev, unsigned gpu, unsigned *mhz, size_t cap,
                                  size_t *ret_n)
{
    struct nvml *nv = eerl__device_impl(dev);
    unsigned mem[NVML_MAX_MEM_CLOCKS], clocks[EERL_DEVICE_CLOCKS_MAX];
    unsigned nmem = NVML_MAX_MEM_CLOCKS, n = EERL_DEVICE_CLOCKS_MAX, top = 0, i, k;
    char what[48];
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    int e;

    if (!nv->f.get_mem_clocks)
        return missing(dev, S_MEM_CLOCKS, gpu);
    if (!nv->f.get_gr_clocks)
        return missing(dev, S_GR_CLOCKS, gpu);
    e = handle(dev, gpu, &h);
    if (e < 0)
        return e;
    r = nv->f.get_mem_clocks(h, &nmem, mem);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, S_MEM_CLOCKS, gpu, NULL, r);
    if (nmem == 0 || nmem > NVML_MAX_MEM_CLOCKS)
        return eerl__device_fail(dev, EERL_ENVML, "%s (gpu %u): returned %u memory clocks",
                                 nv->used[S_MEM_CLOCKS], gpu, nmem);
    for (i = 0; i < nmem; i++)
        top = mem[i] > top ? mem[i] : top;
    r = nv->f.get_gr_clocks(h, top, &n, clocks);
    snprintf(what, sizeof(what), ", memory %u MHz", top);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, S_GR_CLOCKS, gpu, what, r);
    if (n == 0 || n > EERL_DEVICE_CLOCKS_MAX)
        return eerl__device_fail(dev, EERL_ENVML, "%s (gpu %u%s): returned %u SM clocks",
                                 nv->used[S_GR_CLOCKS], gpu, what, n);
    qsort(clocks, n, sizeof(clocks[0]), cmp_desc);
    for (i = 0, k = 0; i < n; i++)
        if (k == 0 || clocks[k - 1] != clocks[i])
            clocks[k++] = clocks[i];
    if (k > cap)
        return eerl__device_fail(dev, EERL_EOVERFLOW,
                                 "gpu %u has %u supported SM clocks; the buffer holds %zu", gpu, k,
                                 cap);
    memcpy(mhz, clocks, k * sizeof(*mhz));
    *ret_n = k;
    return 0;
}

static int op_sm_clock(eerl_device *dev, unsigned gpu, unsigned *ret_mhz)
{
    struct nvml *nv = eerl__device_impl(dev);
    unsigned v;
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    int e = handle(dev, gpu, &h);

    if (e < 0)
        return e;
    r = nv->f.get_clock_info(h, NVML_CLOCK_SM, &v);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, S_CLOCK_INFO, gpu, ", NVML_CLOCK_SM", r);
    *ret_mhz = v;
    return 0;
}

/* A 64-bit reading through get (the symbol sym, which may be absent from the library). */
static int read_u64(eerl_device *dev, unsigned gpu, int sym,
                    nvmlReturn_t (*get)(nvmlDevice_t, unsigned long long *), uint64_t *ret)
{
    unsigned long long v;
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    int e;

    if (!get)
        return missing(dev, sym, gpu);
    e = handle(dev, gpu, &h);
    if (e < 0)
        return e;
    r = get(h, &v);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, sym, gpu, NULL, r);
    *ret = (uint64_t)v;
    return 0;
}

static int op_energy_mj(eerl_device *dev, unsigned gpu, uint64_t *ret_mj)
{
    struct nvml *nv = eerl__device_impl(dev);

    return read_u64(dev, gpu, S_ENERGY, nv->f.get_energy, ret_mj);
}

/* A 32-bit reading through get (the symbol sym, which may be absent from the library). */
static int read_u32(eerl_device *dev, unsigned gpu, int sym,
                    nvmlReturn_t (*get)(nvmlDevice_t, unsigned int *), unsigned *ret)
{
    unsigned v;
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    int e;

    if (!get)
        return missing(dev, sym, gpu);
    e = handle(dev, gpu, &h);
    if (e < 0)
        return e;
    r = get(h, &v);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, sym, gpu, NULL, r);
    *ret = v;
    return 0;
}

static int op_power_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    struct nvml *nv = eerl__device_impl(dev);

    return read_u32(dev, gpu, S_POWER, nv->f.get_power, ret_mw);
}

/* Read only: the limit an operator, a power manager or the board enforces now. */
static int op_power_limit_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    struct nvml *nv = eerl__device_impl(dev);

    return read_u32(dev, gpu, S_POWER_LIMIT, nv->f.get_power_limit, ret_mw);
}

/* One field through nvmlDeviceGetFieldValues: the call costs microseconds where
 * nvmlDeviceGetPowerUsage's 1 s average would blur the meter's power samples (docs/meter.md). */
static int op_power_instant_mw(eerl_device *dev, unsigned gpu, unsigned *ret_mw)
{
    struct nvml *nv = eerl__device_impl(dev);
    nvmlFieldValue_t fv;
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    double v;
    int e;

    if (!nv->f.get_field_values)
        return missing(dev, S_FIELD_VALUES, gpu);
    e = handle(dev, gpu, &h);
    if (e < 0)
        return e;
    memset(&fv, 0, sizeof(fv));
    fv.fieldId = NVML_FI_DEV_POWER_INSTANT;
    r = nv->f.get_field_values(h, 1, &fv);
    if (r == NVML_SUCCESS)
        r = fv.nvmlReturn;
    if (r != NVML_SUCCESS)
        return nv_fail(dev, S_FIELD_VALUES, gpu, ", NVML_FI_DEV_POWER_INSTANT", r);
    switch (fv.valueType) {
    case 0:
        v = fv.value.dVal;
        break;
    case 1:
        v = fv.value.uiVal;
        break;
    case 2:
        v = (double)fv.value.ulVal;
        break;
    case 3:
        v = (double)fv.value.ullVal;
        break;
    case 4:
        v = (double)fv.value.sllVal;
        break;
    case 5:
        v = fv.value.siVal;
        break;
    case 6:
        v = fv.value.usVal;
        break;
    default:
        v = -1;
    }
    if (!(v >= 0 && v <= 4e9))
        return eerl__device_fail(dev, EERL_ENVML,
                                 "%s (gpu %u, NVML_FI_DEV_POWER_INSTANT): value type %d, value "
                                 "out of range",
                                 nv->used[S_FIELD_VALUES], gpu, fv.valueType);
    *ret_mw = (unsigned)v;
    return 0;
}

static int op_throttle_reasons(eerl_device *dev, unsigned gpu, uint64_t *ret_mask)
{
    struct nvml *nv = eerl__device_impl(dev);

    return read_u64(dev, gpu, S_REASONS, nv->f.get_reasons, ret_mask);
}

static int op_lock_sm_clocks(eerl_device *dev, unsigned gpu, unsigned min_mhz, unsigned max_mhz)
{
    struct nvml *nv = eerl__device_impl(dev);
    char what[48];
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    int e;

    if (!nv->f.lock)
        return missing(dev, S_LOCK, gpu);
    e = handle(dev, gpu, &h);
    if (e < 0)
        return e;
    r = nv->f.lock(h, min_mhz, max_mhz);
    if (r != NVML_SUCCESS) {
        snprintf(what, sizeof(what), ", %u-%u MHz", min_mhz, max_mhz);
        return nv_fail(dev, S_LOCK, gpu, what, r);
    }
    return 0;
}

static int op_reset_sm_clocks(eerl_device *dev, unsigned gpu)
{
    struct nvml *nv = eerl__device_impl(dev);
    nvmlDevice_t h = NULL;
    nvmlReturn_t r;
    int e;

    if (!nv->f.reset)
        return missing(dev, S_RESET, gpu);
    e = handle(dev, gpu, &h);
    if (e < 0)
        return e;
    r = nv->f.reset(h);
    if (r != NVML_SUCCESS)
        return nv_fail(dev, S_RESET, gpu, NULL, r);
    return 0;
}

static void nvml_close(struct nvml *nv, int initialized)
{
    if (!nv)
        return;
    if (initialized && nv->f.shutdown)
        nv->f.shutdown();
    if (nv->dl)
        dlclose(nv->dl);
    pthread_mutex_destroy(&nv->mu);
    free(nv->handles);
    free(nv);
}

static void op_free(void *impl)
{
    nvml_close(impl, 1);
}

/* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80. */
static int op_driver_version(eerl_device *dev, char *buf, size_t len)
{
    struct nvml *nv = eerl__device_impl(dev);
    char tmp[81];
    nvmlReturn_t r;
    size_t n;

    if (!nv->f.get_driver_version)
        return eerl__device_fail(dev, EERL_ENOTSUP, "%s does not export %s (driver too old)",
                                 nv->lib, syms[S_DRIVER_VERSION].names[0]);
    memset(tmp, 0, sizeof(tmp));
    r = nv->f.get_driver_version(tmp, sizeof(tmp) - 1);
    if (r != NVML_SUCCESS)
        return eerl__device_fail(dev, map_status(r), "%s: %s (NVML status %d)",
                                 nv->used[S_DRIVER_VERSION], nv_text(nv, r), (int)r);
    n = strlen(tmp);
    if (n >= len)
        return eerl__device_fail(dev, EERL_EOVERFLOW, "%s: %zu bytes needed, room for %zu",
                                 nv->used[S_DRIVER_VERSION], n + 1, len);
    memcpy(buf, tmp, n + 1);
    return 0;
}

static const struct eerl__device_ops nvml_ops = {
    .backend = "nvml",
    .count = op_count,
    .name = op_name,
    .uuid = op_uuid,
    .supported_sm_clocks = op_supported_sm_clocks,
    .sm_clock = op_sm_clock,
    .energy_mj = op_energy_mj,
    .power_mw = op_power_mw,
    .throttle_reasons = op_throttle_reasons,
    .lock_sm_clocks = op_lock_sm_clocks,
    .reset_sm_clocks = op_reset_sm_clocks,
    .free = op_free,
    .power_instant_mw = op_power_instant_mw,
    .driver_version = op_driver_version,
    .power_limit_mw = op_power_limit_mw,
};

static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static int load_library(struct nvml *nv, char *why, size_t why_len)
{
    static const char *const defaults[] = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
    const char *env = getenv("EERL_NVML_LIBRARY");
    const char *err;
    size_t i;

    if (env && *env) {
        nv->dl = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!nv->dl) {
            err = dlerror();
            say(why, why_len, "no NVIDIA driver: EERL_NVML_LIBRARY=%s cannot be loaded: %s", env,
                err ? err : "dlopen failed");
            return EERL_ENODRIVER;
        }
        snprintf(nv->lib, sizeof(nv->lib), "%s", env);
        return 0;
    }
    for (i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
        nv->dl = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
        if (nv->dl) {
            snprintf(nv->lib, sizeof(nv->lib), "%s", defaults[i]);
            return 0;
        }
    }
    err = dlerror();
    say(why, why_len, "no NVIDIA driver: libnvidia-ml.so.1 not found (%s)",
        err ? err : "dlopen failed");
    return EERL_ENODRIVER;
}

static int resolve(struct nvml *nv, char *why, size_t why_len)
{
    size_t i, j;

    for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *p = NULL;

        for (j = 0; j < 2 && syms[i].names[j] && !p; j++) {
            dlerror();
            p = dlsym(nv->dl, syms[i].names[j]);
            if (p)
                nv->used[i] = syms[i].names[j];
        }
        if (!p) {
            nv->used[i] = syms[i].names[0];
            if (syms[i].required) {
                say(why, why_len, "%s does not export %s%s%s: not a usable NVML library", nv->lib,
                    syms[i].names[0], syms[i].names[1] ? " or " : "",
                    syms[i].names[1] ? syms[i].names[1] : "");
                return EERL_ENOSYM;
            }
        }
        /* Function pointers and void * share a representation on every platform dlsym runs on;
         * memcpy keeps ISO C quiet about the conversion. */
        memcpy((char *)&nv->f + syms[i].offset, &p, sizeof(p));
    }
    return 0;
}

int eerl_device_open_nvml_ex(char *why, size_t why_len, eerl_device **ret_dev)
{
    struct nvml *nv;
    eerl_device *dev = NULL;
    nvmlReturn_t r;
    int e, initialized = 0;

    if (!ret_dev)
        return EERL_EINVAL;
    nv = calloc(1, sizeof(*nv));
    if (!nv)
        return EERL_ENOMEM;
    pthread_mutex_init(&nv->mu, NULL);
    e = load_library(nv, why, why_len);
    if (e < 0)
        goto fail;
    e = resolve(nv, why, why_len);
    if (e < 0)
        goto fail;
    r = nv->f.init();
    if (r != NVML_SUCCESS) {
        e = map_status(r);
        say(why, why_len, "%s%s (%s): %s (NVML status %d)",
            e == EERL_ENODRIVER ? "no NVIDIA driver: " : "", nv->used[S_INIT], nv->lib,
            nv_text(nv, r), (int)r);
        goto fail;
    }
    initialized = 1;
    r = nv->f.get_count(&nv->count);
    if (r != NVML_SUCCESS) {
        e = map_status(r);
        say(why, why_len, "%s: %s (NVML status %d)", nv->used[S_COUNT], nv_text(nv, r), (int)r);
        goto fail;
    }
    nv->handles = calloc(nv->count ? nv->count : 1, sizeof(*nv->handles));
    if (!nv->handles) {
        e = EERL_ENOMEM;
        goto fail;
    }
    e = eerl__device_new(&nvml_ops, nv, &dev);
    if (e < 0)
        goto fail;
    *ret_dev = dev;
    return 0;
fail:
    if (e == EERL_ENOMEM)
        say(why, why_len, "%s", eerl_strerror(e));
    nvml_close(nv, initialized);
    return e;
}

int eerl_device_open_nvml(eerl_device **ret_dev)
{
    return eerl_device_open_nvml_ex(NULL, 0, ret_dev);
}
