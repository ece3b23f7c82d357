/*
 * Copyright: contributors to the gpufleet.vllm collection
 * GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or
 * https://www.gnu.org/licenses/gpl-3.0.txt)
 * SPDX-License-Identifier: GPL-3.0-or-later
 *
 * Fake NVML: a stand-in for libnvidia-ml.so.1 on simulated GPU hosts.
 *
 * It implements the part of the NVML C API that nvidia-ml-py (pynvml) calls
 * for init/shutdown, device enumeration, name, UUID, PCI info, memory (v1 and
 * v2), compute capability, driver and CUDA versions, running processes and
 * process names.  Every call re-reads the state file (format: state.py next
 * to this file), so a change made by `state.py set/claim/release` shows in the
 * next call of any process.  Processes whose PID is not alive (or a zombie)
 * are ignored, as the real driver frees a dead process's memory; memory the
 * driver has not given back yet (held_mib until held_until) counts as used.
 *
 * Struct layouts follow nvml.h and pynvml's ctypes definitions.  Only the
 * symbols below are exported (built with -fvisibility=hidden); pynvml raises
 * NVMLError_FunctionNotFound for anything else, as with an old driver.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define NVML_API __attribute__((visibility("default")))

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999
};

static const struct {
    int code;
    const char *name; /* without the NVML_ERROR_ prefix */
    const char *text; /* what nvmlErrorString returns */
} ERRORS[] = {
    {NVML_SUCCESS, "SUCCESS", "Success"},
    {NVML_ERROR_UNINITIALIZED, "UNINITIALIZED", "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT", "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "NOT_SUPPORTED", "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "NO_PERMISSION", "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "ALREADY_INITIALIZED", "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "NOT_FOUND", "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "TIMEOUT", "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "IRQ_ISSUE", "Interrupt Request Issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "RESET_REQUIRED", "GPU requires restart"},
    {NVML_ERROR_OPERATING_SYSTEM, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_IN_USE, "IN_USE", "In use by another client"},
    {NVML_ERROR_MEMORY, "MEMORY", "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "NO_DATA", "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "VGPU_ECC_NOT_SUPPORTED", "vGPU ECC not supported"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES", "Insufficient resources"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "FREQ_NOT_SUPPORTED", "Frequency not supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"},
    {NVML_ERROR_DEPRECATED, "DEPRECATED", "Deprecated"},
    {NVML_ERROR_NOT_READY, "NOT_READY", "Not ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "GPU_NOT_FOUND", "GPU not found"},
    {NVML_ERROR_INVALID_STATE, "INVALID_STATE", "Invalid state"},
    {NVML_ERROR_RESET_TYPE_NOT_SUPPORTED, "RESET_TYPE_NOT_SUPPORTED", "Reset type not supported"},
    {NVML_ERROR_UNKNOWN, "UNKNOWN", "Unknown Error"},
};

#define N_ERRORS ((int)(sizeof(ERRORS) / sizeof(ERRORS[0])))

/* ---- public structs (layouts as in nvml.h / pynvml) -------------------- */

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t; /* nvmlDeviceGetPciInfo_v3 */

typedef struct {
    char busId[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfo_v2_t; /* nvmlDeviceGetPciInfo_v2 */

typedef struct {
    char busId[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
} nvmlPciInfo_v1_t; /* nvmlDeviceGetPciInfo (unversioned symbol) */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t; /* also the layout of _v3 (nvmlProcessInfo_t) */

struct nvmlDevice_st {
    unsigned int index;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

/* ---- state ------------------------------------------------------------- */

#define MAX_GPUS 64
#define MAX_PROCS 128
#define MAX_CLOCK_SEQ 32
#define STR_LEN 96
#define MIB (1024ULL * 1024ULL)
#define DEFAULT_STATE_PATH "/var/lib/fake-nvml/state"

typedef struct {
    unsigned int pid;
    unsigned long long mib;
} proc_t;

typedef struct {
    char name[STR_LEN];
    char uuid[STR_LEN];
    unsigned int domain, bus, device;
    unsigned int pci_device_id;
    unsigned long long total_mib, base_used_mib, reserved_mib;
    unsigned long long held_mib; /* used with no process until held_until */
    long long held_until;        /* Unix time, seconds */
    int cc_major, cc_minor;
    nvmlReturn_t error; /* returned by every query on this GPU's handle */
    /* health (see state.py): */
    int ecc_mode, ecc_pending_mode;
    unsigned long long ecc_uncorrected_volatile, ecc_uncorrected_aggregate;
    unsigned long long ecc_corrected_volatile, ecc_corrected_aggregate;
    int retired_pages_pending;
    unsigned int remapped_corrected, remapped_uncorrected, remapped_pending, remapped_failure;
    unsigned long long clocks_event_reasons;
    unsigned int temperature_c, temperature_slowdown_c, temperature_shutdown_c;
    unsigned int power_mw, power_limit_mw;
    unsigned int pcie_gen, pcie_width, pcie_max_gen, pcie_max_width, pcie_gpu_max_gen;
    int persistence_mode;
    unsigned int unsupported; /* FIELD_* bits: those calls answer NOT_SUPPORTED */
    /* clocks_event_reasons_seq: the n-th reading of this process answers the n-th mask (the last one repeated) */
    unsigned long long clock_seq[MAX_CLOCK_SEQ];
    int clock_seq_n;
    unsigned int reported_procs; /* the count a size query of the compute processes answers (0: the real one) */
    int nprocs;
    proc_t procs[MAX_PROCS];
} gpu_t;

typedef struct {
    char driver_version[80];
    int cuda_driver_version;
    nvmlReturn_t init_error;
    int memory_v2; /* 0: nvmlDeviceGetMemoryInfo_v2 says FUNCTION_NOT_FOUND */
    int temperature_v; /* 0: nvmlDeviceGetTemperatureV says FUNCTION_NOT_FOUND */
    int reported_count_set; /* reported_gpu_count: what nvmlDeviceGetCount answers, a broken count */
    unsigned int reported_count;
    char hostname[256];
    int count;
    gpu_t defaults;
    gpu_t gpu[MAX_GPUS];
} state_t;

static struct nvmlDevice_st g_devices[MAX_GPUS];
static int g_init_count;
static unsigned int g_clock_reads[MAX_GPUS]; /* readings of the clock event reasons, per GPU, in this process */

__attribute__((constructor)) static void fake_nvml_setup(void)
{
    for (unsigned int i = 0; i < MAX_GPUS; i++)
        g_devices[i].index = i;
}

static int is_initialized(void)
{
    return __atomic_load_n(&g_init_count, __ATOMIC_SEQ_CST) > 0;
}

static char *trim(char *s)
{
    char *end;
    while (*s == ' ' || *s == '\t')
        s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        *--end = '\0';
    return s;
}

static void copy_str(char *dst, size_t size, const char *src)
{
    snprintf(dst, size, "%s", src);
}

static nvmlReturn_t error_from_name(const char *name)
{
    if (strncasecmp(name, "NVML_ERROR_", 11) == 0)
        name += 11;
    for (int i = 0; i < N_ERRORS; i++)
        if (strcasecmp(name, ERRORS[i].name) == 0)
            return ERRORS[i].code;
    /* a bare number is accepted too */
    char *end = NULL;
    long code = strtol(name, &end, 10);
    if (end && end != name && *end == '\0')
        return (nvmlReturn_t)code;
    return NVML_ERROR_UNKNOWN;
}

static int parse_bool(const char *v)
{
    return strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 ||
           strcasecmp(v, "on") == 0;
}

static unsigned long long parse_ull(const char *v, unsigned long long fallback)
{
    char *end = NULL;
    unsigned long long x = strtoull(v, &end, 10);
    return (end && end != v) ? x : fallback;
}

/* Unix time in seconds; out of range: the nearest end (held forever, or never) */
static long long parse_time(const char *v, long long fallback)
{
    char *end = NULL;
    long long x = strtoll(v, &end, 10); /* saturates at LLONG_MIN / LLONG_MAX */
    return (end && end != v) ? x : fallback;
}

static void parse_cc(const char *v, int *major, int *minor)
{
    int a = 0, b = 0;
    if (sscanf(v, "%d.%d", &a, &b) == 2) {
        *major = a;
        *minor = b;
    } else if (sscanf(v, "%d", &a) == 1) {
        *major = a;
        *minor = 0;
    }
}

/* "00000000:18:00.0", "0000:18:00.0" or "18:00.0" (domain 0). */
static int parse_pci(const char *v, unsigned int *domain, unsigned int *bus, unsigned int *device)
{
    unsigned int d = 0, b = 0, dev = 0, fn = 0;
    if (sscanf(v, "%x:%x:%x.%x", &d, &b, &dev, &fn) == 4 || sscanf(v, "%x:%x:%x", &d, &b, &dev) == 3) {
        *domain = d;
        *bus = b;
        *device = dev;
        return 1;
    }
    if (sscanf(v, "%x:%x.%x", &b, &dev, &fn) == 3) {
        *domain = 0;
        *bus = b;
        *device = dev;
        return 1;
    }
    return 0;
}

static void parse_procs(gpu_t *g, const char *v)
{
    char buf[8192];
    char *save = NULL;
    copy_str(buf, sizeof(buf), v);
    g->nprocs = 0;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long pid = 0;
        unsigned long long mib = 0;
        item = trim(item);
        if (!*item)
            continue;
        if (sscanf(item, "%lu:%llu", &pid, &mib) < 1)
            continue;
        if (g->nprocs < MAX_PROCS) {
            g->procs[g->nprocs].pid = (unsigned int)pid;
            g->procs[g->nprocs].mib = mib;
            g->nprocs++;
        }
    }
}

/* FNV-1a 64 then the splitmix64 finaliser; state.py (default_uuid) has the
   same function, so tests can predict the UUIDs. */
static unsigned long long hash64(const char *s)
{
    unsigned long long h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static void default_uuid(char *out, size_t size, const char *hostname, int index)
{
    char seed[400];
    unsigned long long h1, h2;
    snprintf(seed, sizeof(seed), "gpufleet-fakenvml:%s:%d", hostname, index);
    h1 = hash64(seed);
    snprintf(seed, sizeof(seed), "gpufleet-fakenvml:%s:%d:2", hostname, index);
    h2 = hash64(seed);
    snprintf(out, size, "GPU-%08llx-%04llx-%04llx-%04llx-%012llx", h1 >> 32, (h1 >> 16) & 0xffffULL,
             h1 & 0xffffULL, h2 >> 48, h2 & 0xffffffffffffULL);
}

/* Health calls that `unsupported=` can make answer NVML_ERROR_NOT_SUPPORTED. */
enum {
    FIELD_ECC = 1U << 0,           /* nvmlDeviceGetTotalEccErrors */
    FIELD_ECC_MODE = 1U << 1,      /* nvmlDeviceGetEccMode */
    FIELD_RETIRED_PAGES = 1U << 2, /* nvmlDeviceGetRetiredPagesPendingStatus */
    FIELD_REMAPPED_ROWS = 1U << 3, /* nvmlDeviceGetRemappedRows */
    FIELD_CLOCKS = 1U << 4,        /* nvmlDeviceGetCurrentClocks{Event,Throttle}Reasons */
    FIELD_TEMPERATURE = 1U << 5,   /* nvmlDeviceGetTemperature(V) */
    FIELD_TEMP_THRESHOLD = 1U << 6,/* nvmlDeviceGetTemperatureThreshold */
    FIELD_POWER = 1U << 7,         /* nvmlDeviceGetPowerUsage */
    FIELD_POWER_LIMIT = 1U << 8,   /* nvmlDeviceGetEnforcedPowerLimit */
    FIELD_PCIE = 1U << 9,          /* nvmlDevice{Get,GetGpu}{Curr,Max}PcieLink* */
    FIELD_PERSISTENCE = 1U << 10,  /* nvmlDeviceGetPersistenceMode */
    FIELD_PCIE_GEN = 1U << 11,     /* the generation calls alone: nvmlDevice{Get,GetGpu}{Curr,Max}PcieLinkGeneration */
};

static const struct {
    const char *name;
    unsigned int bit;
} FIELDS[] = {
    {"ecc", FIELD_ECC},
    {"ecc_mode", FIELD_ECC_MODE},
    {"retired_pages", FIELD_RETIRED_PAGES},
    {"remapped_rows", FIELD_REMAPPED_ROWS},
    {"clocks_event_reasons", FIELD_CLOCKS},
    {"temperature", FIELD_TEMPERATURE},
    {"temperature_threshold", FIELD_TEMP_THRESHOLD},
    {"power", FIELD_POWER},
    {"power_limit", FIELD_POWER_LIMIT},
    {"pcie", FIELD_PCIE},
    {"pcie_gen", FIELD_PCIE_GEN},
    {"persistence_mode", FIELD_PERSISTENCE},
};

#define N_FIELDS ((int)(sizeof(FIELDS) / sizeof(FIELDS[0])))

/* "ecc,remapped_rows" -> the FIELD_* bits; unknown names are ignored, "all" is every field */
static unsigned int parse_fields(const char *v)
{
    char buf[512];
    char *save = NULL;
    unsigned int bits = 0;
    copy_str(buf, sizeof(buf), v);
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        item = trim(item);
        if (strcasecmp(item, "all") == 0)
            bits = ~0U;
        for (int i = 0; i < N_FIELDS; i++)
            if (strcasecmp(item, FIELDS[i].name) == 0)
                bits |= FIELDS[i].bit;
    }
    return bits;
}

/* a 32-bit counter or reading; out of range or not a number: the fallback */
static unsigned int parse_uint(const char *v, unsigned int fallback)
{
    unsigned long long x = parse_ull(v, fallback);
    return x > 0xffffffffULL ? fallback : (unsigned int)x;
}

/* a bit mask, decimal or 0x hexadecimal */
static unsigned long long parse_mask(const char *v, unsigned long long fallback)
{
    char *end = NULL;
    unsigned long long x;
    if (*v == '-')
        return fallback;
    x = strtoull(v, &end, 0);
    return (end && end != v && *end == '\0') ? x : fallback;
}

/* "0x88,0,0": up to MAX_CLOCK_SEQ masks; a bad item ends the list */
static void parse_clock_seq(gpu_t *g, const char *v)
{
    char buf[1024];
    char *save = NULL;
    copy_str(buf, sizeof(buf), v);
    g->clock_seq_n = 0;
    for (char *item = strtok_r(buf, ",", &save); item && g->clock_seq_n < MAX_CLOCK_SEQ;
         item = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        unsigned long long x;
        item = trim(item);
        if (!*item || *item == '-')
            break;
        x = strtoull(item, &end, 0);
        if (!end || *end != '\0')
            break;
        g->clock_seq[g->clock_seq_n++] = x;
    }
}

/* Bus numbers of an 8-GPU server; further GPUs go to the next PCI domains. */
static const unsigned int DEFAULT_BUS[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

static void set_gpu_key(gpu_t *g, const char *key, const char *value)
{
    if (strcmp(key, "name") == 0)
        copy_str(g->name, sizeof(g->name), value);
    else if (strcmp(key, "uuid") == 0)
        copy_str(g->uuid, sizeof(g->uuid), value);
    else if (strcmp(key, "pci_bus_id") == 0)
        parse_pci(value, &g->domain, &g->bus, &g->device);
    else if (strcmp(key, "pci_device_id") == 0)
        g->pci_device_id = (unsigned int)strtoul(value, NULL, 0);
    else if (strcmp(key, "total_mib") == 0)
        g->total_mib = parse_ull(value, g->total_mib);
    else if (strcmp(key, "base_used_mib") == 0)
        g->base_used_mib = parse_ull(value, g->base_used_mib);
    else if (strcmp(key, "reserved_mib") == 0)
        g->reserved_mib = parse_ull(value, g->reserved_mib);
    else if (strcmp(key, "held_mib") == 0)
        g->held_mib = parse_ull(value, g->held_mib);
    else if (strcmp(key, "held_until") == 0)
        g->held_until = parse_time(value, g->held_until);
    else if (strcmp(key, "cc") == 0)
        parse_cc(value, &g->cc_major, &g->cc_minor);
    else if (strcmp(key, "lost") == 0) {
        if (parse_bool(value))
            g->error = NVML_ERROR_GPU_IS_LOST;
    } else if (strcmp(key, "error") == 0) {
        if (*value)
            g->error = error_from_name(value);
    } else if (strcmp(key, "procs") == 0)
        parse_procs(g, value);
    else if (strcmp(key, "ecc_mode") == 0)
        g->ecc_mode = g->ecc_pending_mode = parse_bool(value);
    else if (strcmp(key, "ecc_pending_mode") == 0)
        g->ecc_pending_mode = parse_bool(value);
    else if (strcmp(key, "ecc_uncorrected_volatile") == 0)
        g->ecc_uncorrected_volatile = parse_ull(value, g->ecc_uncorrected_volatile);
    else if (strcmp(key, "ecc_uncorrected_aggregate") == 0)
        g->ecc_uncorrected_aggregate = parse_ull(value, g->ecc_uncorrected_aggregate);
    else if (strcmp(key, "ecc_corrected_volatile") == 0)
        g->ecc_corrected_volatile = parse_ull(value, g->ecc_corrected_volatile);
    else if (strcmp(key, "ecc_corrected_aggregate") == 0)
        g->ecc_corrected_aggregate = parse_ull(value, g->ecc_corrected_aggregate);
    else if (strcmp(key, "retired_pages_pending") == 0)
        g->retired_pages_pending = parse_bool(value);
    else if (strcmp(key, "remapped_rows_corrected") == 0)
        g->remapped_corrected = parse_uint(value, g->remapped_corrected);
    else if (strcmp(key, "remapped_rows_uncorrected") == 0)
        g->remapped_uncorrected = parse_uint(value, g->remapped_uncorrected);
    else if (strcmp(key, "remapped_rows_pending") == 0)
        g->remapped_pending = parse_bool(value);
    else if (strcmp(key, "remapped_rows_failure") == 0)
        g->remapped_failure = parse_bool(value);
    else if (strcmp(key, "clocks_event_reasons") == 0)
        g->clocks_event_reasons = parse_mask(value, g->clocks_event_reasons);
    else if (strcmp(key, "temperature_c") == 0)
        g->temperature_c = parse_uint(value, g->temperature_c);
    else if (strcmp(key, "temperature_slowdown_c") == 0)
        g->temperature_slowdown_c = parse_uint(value, g->temperature_slowdown_c);
    else if (strcmp(key, "temperature_shutdown_c") == 0)
        g->temperature_shutdown_c = parse_uint(value, g->temperature_shutdown_c);
    else if (strcmp(key, "power_mw") == 0)
        g->power_mw = parse_uint(value, g->power_mw);
    else if (strcmp(key, "power_limit_mw") == 0)
        g->power_limit_mw = parse_uint(value, g->power_limit_mw);
    else if (strcmp(key, "pcie_gen") == 0)
        g->pcie_gen = parse_uint(value, g->pcie_gen);
    else if (strcmp(key, "pcie_width") == 0)
        g->pcie_width = parse_uint(value, g->pcie_width);
    else if (strcmp(key, "pcie_max_gen") == 0)
        g->pcie_max_gen = parse_uint(value, g->pcie_max_gen);
    else if (strcmp(key, "pcie_max_width") == 0)
        g->pcie_max_width = parse_uint(value, g->pcie_max_width);
    else if (strcmp(key, "pcie_gpu_max_gen") == 0)
        g->pcie_gpu_max_gen = parse_uint(value, g->pcie_gpu_max_gen);
    else if (strcmp(key, "persistence_mode") == 0)
        g->persistence_mode = parse_bool(value);
    else if (strcmp(key, "unsupported") == 0)
        g->unsupported = parse_fields(value);
    else if (strcmp(key, "clocks_event_reasons_seq") == 0)
        parse_clock_seq(g, value);
    else if (strcmp(key, "reported_procs") == 0)
        g->reported_procs = parse_uint(value, g->reported_procs);
}

static void apply_lines(state_t *st, const char *text, int pass)
{
    char *save = NULL;
    char *copy = strdup(text);
    if (!copy)
        return;
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *eq, *key, *value;
        l = trim(l);
        if (!*l || *l == '#' || !(eq = strchr(l, '=')))
            continue;
        *eq = '\0';
        key = trim(l);
        value = trim(eq + 1);
        if (pass == 1) {
            if (strcmp(key, "driver_version") == 0)
                copy_str(st->driver_version, sizeof(st->driver_version), value);
            else if (strcmp(key, "cuda_driver_version") == 0)
                st->cuda_driver_version = (int)parse_ull(value, 13000);
            else if (strcmp(key, "init_error") == 0)
                st->init_error = *value ? error_from_name(value) : NVML_SUCCESS;
            else if (strcmp(key, "memory_v2") == 0)
                st->memory_v2 = parse_bool(value);
            else if (strcmp(key, "temperature_v") == 0)
                st->temperature_v = parse_bool(value);
            else if (strcmp(key, "reported_gpu_count") == 0 && *value) {
                unsigned long long x = parse_ull(value, 0);
                st->reported_count_set = 1;
                st->reported_count = x > 0xffffffffULL ? 0xffffffffU : (unsigned int)x;
            }
            else if (strcmp(key, "hostname") == 0 && *value)
                copy_str(st->hostname, sizeof(st->hostname), value);
            else if (strcmp(key, "gpu_count") == 0)
                st->count = (int)parse_ull(value, 8);
            else if (strncmp(key, "default.", 8) == 0)
                set_gpu_key(&st->defaults, key + 8, value);
        } else if (strncmp(key, "gpu.", 4) == 0) {
            char *dot = NULL;
            long idx = strtol(key + 4, &dot, 10);
            if (dot && *dot == '.' && idx >= 0 && idx < MAX_GPUS)
                set_gpu_key(&st->gpu[idx], dot + 1, value);
        }
    }
    free(copy);
}

static const char *state_path(void)
{
    const char *p = getenv("FAKE_NVML_STATE");
    return (p && *p) ? p : DEFAULT_STATE_PATH;
}

/*
 * Read the state file into a fresh state_t (caller frees).  A missing file
 * means all defaults; an unreadable one gives NO_PERMISSION (or UNKNOWN).
 */
static state_t *load_state(nvmlReturn_t *rc)
{
    state_t *st = calloc(1, sizeof(*st));
    FILE *f;
    char *line = NULL;
    size_t cap = 0;
    char *text = NULL;
    size_t text_len = 0;

    if (!st) {
        *rc = NVML_ERROR_MEMORY;
        return NULL;
    }
    copy_str(st->driver_version, sizeof(st->driver_version), "580.95.05");
    st->cuda_driver_version = 13000;
    st->init_error = NVML_SUCCESS;
    st->memory_v2 = 1;
    st->temperature_v = 1;
    st->count = 8;
    if (gethostname(st->hostname, sizeof(st->hostname) - 1) != 0)
        copy_str(st->hostname, sizeof(st->hostname), "localhost");
    copy_str(st->defaults.name, sizeof(st->defaults.name), "NVIDIA RTX PRO 6000 Blackwell Server Edition");
    st->defaults.total_mib = 97887;
    st->defaults.cc_major = 12;
    st->defaults.cc_minor = 0;
    st->defaults.pci_device_id = 0x2bb510de;
    /* a healthy, idle RTX PRO 6000 Blackwell Server Edition */
    st->defaults.ecc_mode = st->defaults.ecc_pending_mode = 1;
    st->defaults.clocks_event_reasons = 0x1; /* GPU idle */
    st->defaults.temperature_c = 35;
    st->defaults.temperature_slowdown_c = 90;
    st->defaults.temperature_shutdown_c = 95;
    st->defaults.power_mw = 32000;
    st->defaults.power_limit_mw = 600000;
    st->defaults.pcie_gen = st->defaults.pcie_max_gen = st->defaults.pcie_gpu_max_gen = 5;
    st->defaults.pcie_width = st->defaults.pcie_max_width = 16;
    st->defaults.persistence_mode = 1;

    f = fopen(state_path(), "r");
    if (!f) {
        if (errno != ENOENT) {
            *rc = (errno == EACCES || errno == EPERM) ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
            free(st);
            return NULL;
        }
    } else {
        FILE *mem = open_memstream(&text, &text_len);
        if (!mem) {
            fclose(f);
            free(st);
            *rc = NVML_ERROR_MEMORY;
            return NULL;
        }
        while (getline(&line, &cap, f) != -1)
            fputs(line, mem);
        fclose(mem);
        fclose(f);
        free(line);
        line = NULL;
    }

    if (text)
        apply_lines(st, text, 1); /* global and default.* keys */
    for (int i = 0; i < MAX_GPUS; i++) {
        st->gpu[i] = st->defaults;
        st->gpu[i].uuid[0] = '\0';
        st->gpu[i].domain = (unsigned int)(i / 8);
        st->gpu[i].bus = DEFAULT_BUS[i % 8];
        st->gpu[i].device = 0;
    }
    if (text)
        apply_lines(st, text, 2); /* gpu.<i>.* keys override the defaults */
    free(text);

    if (st->count < 0)
        st->count = 0;
    if (st->count > MAX_GPUS)
        st->count = MAX_GPUS;
    for (int i = 0; i < MAX_GPUS; i++)
        if (!st->gpu[i].uuid[0])
            default_uuid(st->gpu[i].uuid, sizeof(st->gpu[i].uuid), st->hostname, i);
    *rc = NVML_SUCCESS;
    return st;
}

/* A process counts while it exists and is not a zombie. */
static int pid_alive(unsigned int pid)
{
    char path[64], buf[512];
    FILE *f;
    size_t n;
    char *paren;

    if (pid == 0)
        return 0;
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM)
        return 0;
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    f = fopen(path, "r");
    if (!f)
        return 1; /* no /proc: trust kill() */
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    paren = strrchr(buf, ')');
    if (paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'))
        return 0;
    return 1;
}

static void live_procs(const gpu_t *g, proc_t *out, int *n)
{
    *n = 0;
    for (int i = 0; i < g->nprocs; i++)
        if (pid_alive(g->procs[i].pid))
            out[(*n)++] = g->procs[i];
}

/* used and reserved MiB as NVML v2 reports them (used excludes reserved) */
static void memory_of(const gpu_t *g, unsigned long long *total, unsigned long long *reserved,
                      unsigned long long *used)
{
    proc_t procs[MAX_PROCS];
    int n;
    unsigned long long u = g->base_used_mib;
    unsigned long long r = g->reserved_mib;
    /* memory the driver has not given back yet, no process listed (a teardown that takes time) */
    if (g->held_mib && (long long)time(NULL) < g->held_until)
        u = g->held_mib > ~0ULL - u ? ~0ULL : u + g->held_mib; /* (capped at the total below) */
    live_procs(g, procs, &n);
    for (int i = 0; i < n; i++)
        u += procs[i].mib;
    if (r > g->total_mib)
        r = g->total_mib;
    if (u > g->total_mib - r)
        u = g->total_mib - r;
    *total = g->total_mib;
    *reserved = r;
    *used = u;
}

static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

static int handle_index(nvmlDevice_t device)
{
    if (device < &g_devices[0] || device >= &g_devices[MAX_GPUS])
        return -1;
    return (int)(device - &g_devices[0]);
}

/* Common start of a query on a device handle. */
static nvmlReturn_t begin_device(nvmlDevice_t device, state_t **st, gpu_t **g)
{
    nvmlReturn_t rc;
    int idx;
    *st = NULL;
    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    idx = handle_index(device);
    if (idx < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *st = load_state(&rc);
    if (!*st)
        return rc;
    if (idx >= (*st)->count) {
        /* the GPU is gone since the handle was taken */
        free(*st);
        *st = NULL;
        return NVML_ERROR_GPU_IS_LOST;
    }
    *g = &(*st)->gpu[idx];
    if ((*g)->error != NVML_SUCCESS) {
        rc = (*g)->error;
        free(*st);
        *st = NULL;
        return rc;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t begin_system(state_t **st)
{
    nvmlReturn_t rc;
    *st = NULL;
    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    *st = load_state(&rc);
    return *st ? NVML_SUCCESS : rc;
}

/* ---- init / shutdown / errors ------------------------------------------ */

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t rc;
    state_t *st;
    (void)flags;
    st = load_state(&rc);
    if (!st)
        return rc;
    rc = st->init_error;
    free(st);
    if (rc != NVML_SUCCESS)
        return rc;
    __atomic_add_fetch(&g_init_count, 1, __ATOMIC_SEQ_CST);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    int cur = __atomic_load_n(&g_init_count, __ATOMIC_SEQ_CST);
    while (cur > 0) {
        if (__atomic_compare_exchange_n(&g_init_count, &cur, cur - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return NVML_SUCCESS;
    }
    return NVML_ERROR_UNINITIALIZED;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    for (int i = 0; i < N_ERRORS; i++)
        if (ERRORS[i].code == result)
            return ERRORS[i].text;
    return "Unknown Error";
}

/* ---- system queries ---------------------------------------------------- */

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    state_t *st;
    nvmlReturn_t rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = copy_out(version, length, st->driver_version);
    free(st);
    return rc;
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    state_t *st;
    char buf[128];
    nvmlReturn_t rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    /* as real NVML: "<CUDA major>.<driver version>", e.g. 13.580.95.05 */
    snprintf(buf, sizeof(buf), "%d.%s", st->cuda_driver_version / 1000, st->driver_version);
    rc = copy_out(version, length, buf);
    free(st);
    return rc;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    state_t *st;
    nvmlReturn_t rc;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    *cudaDriverVersion = st->cuda_driver_version;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    char path[64], buf[4096];
    FILE *f;
    size_t n = 0;

    if (!is_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!name || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!pid_alive(pid))
        return NVML_ERROR_NOT_FOUND;
    /* argv[0] from cmdline (what nvidia-smi shows), else comm */
    snprintf(path, sizeof(path), "/proc/%u/cmdline", pid);
    f = fopen(path, "r");
    if (f) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
    } else if (errno == EACCES || errno == EPERM) {
        return NVML_ERROR_NO_PERMISSION;
    }
    if (n == 0 || buf[0] == '\0') {
        snprintf(path, sizeof(path), "/proc/%u/comm", pid);
        f = fopen(path, "r");
        if (!f)
            return (errno == EACCES || errno == EPERM) ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_NOT_FOUND;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
    }
    snprintf(name, length, "%s", buf); /* truncated to length, as NVML does */
    return NVML_SUCCESS;
}

/* ---- device enumeration ------------------------------------------------ */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    state_t *st;
    nvmlReturn_t rc;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    *deviceCount = st->reported_count_set ? st->reported_count : (unsigned int)st->count;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    state_t *st;
    nvmlReturn_t rc;
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    if (index >= (unsigned int)st->count) {
        free(st);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    free(st);
    *device = &g_devices[index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    state_t *st;
    nvmlReturn_t rc;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = NVML_ERROR_NOT_FOUND;
    for (int i = 0; i < st->count; i++) {
        if (strcmp(st->gpu[i].uuid, uuid) == 0) {
            *device = &g_devices[i];
            rc = NVML_SUCCESS;
            break;
        }
    }
    free(st);
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    state_t *st;
    nvmlReturn_t rc;
    unsigned int domain, bus, dev;
    if (!pciBusId || !device || !parse_pci(pciBusId, &domain, &bus, &dev))
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_system(&st);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = NVML_ERROR_NOT_FOUND;
    for (int i = 0; i < st->count; i++) {
        const gpu_t *g = &st->gpu[i];
        if (g->domain == domain && g->bus == bus && g->device == dev) {
            *device = &g_devices[i];
            rc = NVML_SUCCESS;
            break;
        }
    }
    free(st);
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- device queries ---------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *index = device->index;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return nvmlDeviceGetIndex(device, minorNumber);
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = copy_out(name, length, g->name);
    free(st);
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = copy_out(uuid, length, g->uuid);
    free(st);
    return rc;
}

static nvmlReturn_t pci_of(nvmlDevice_t device, gpu_t *out)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *out = *g;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    gpu_t *g;
    nvmlReturn_t rc;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    g = malloc(sizeof(*g));
    if (!g)
        return NVML_ERROR_MEMORY;
    rc = pci_of(device, g);
    if (rc == NVML_SUCCESS) {
        memset(pci, 0, sizeof(*pci));
        snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", g->domain & 0xffffU,
                 g->bus & 0xffU, g->device & 0xffU);
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", g->domain, g->bus & 0xffU,
                 g->device & 0xffU);
        pci->domain = g->domain;
        pci->bus = g->bus;
        pci->device = g->device;
        pci->pciDeviceId = g->pci_device_id;
        pci->pciSubSystemId = 0x204e10de;
    }
    free(g);
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_v2_t *pci)
{
    nvmlPciInfo_t v3;
    nvmlReturn_t rc;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = nvmlDeviceGetPciInfo_v3(device, &v3);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(pci, 0, sizeof(*pci));
    memcpy(pci->busId, v3.busIdLegacy, sizeof(pci->busId));
    pci->domain = v3.domain;
    pci->bus = v3.bus;
    pci->device = v3.device;
    pci->pciDeviceId = v3.pciDeviceId;
    pci->pciSubSystemId = v3.pciSubSystemId;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v1_t *pci)
{
    nvmlPciInfo_t v3;
    nvmlReturn_t rc;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = nvmlDeviceGetPciInfo_v3(device, &v3);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(pci, 0, sizeof(*pci));
    memcpy(pci->busId, v3.busIdLegacy, sizeof(pci->busId));
    pci->domain = v3.domain;
    pci->bus = v3.bus;
    pci->device = v3.device;
    pci->pciDeviceId = v3.pciDeviceId;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    state_t *st;
    gpu_t *g;
    unsigned long long total, reserved, used;
    nvmlReturn_t rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    memory_of(g, &total, &reserved, &used);
    /* v1 counts the driver's reserved memory as used */
    memory->total = total * MIB;
    memory->used = (used + reserved) * MIB;
    memory->free = (total - used - reserved) * MIB;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    state_t *st;
    gpu_t *g;
    unsigned long long total, reserved, used;
    nvmlReturn_t rc;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!st->memory_v2) {
        free(st);
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    }
    if (memory->version != nvmlMemory_v2) {
        free(st);
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    memory_of(g, &total, &reserved, &used);
    memory->total = total * MIB;
    memory->reserved = reserved * MIB;
    memory->used = used * MIB;
    memory->free = (total - used - reserved) * MIB;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *major = g->cc_major;
    *minor = g->cc_minor;
    free(st);
    return NVML_SUCCESS;
}

/* version 1: nvmlProcessInfo_v1_t, 2 and 3: nvmlProcessInfo_v2_t */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, int version,
                                      int compute)
{
    state_t *st;
    gpu_t *g;
    proc_t *procs;
    int n = 0;
    nvmlReturn_t rc;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    procs = malloc(sizeof(proc_t) * MAX_PROCS);
    if (!procs) {
        free(st);
        return NVML_ERROR_MEMORY;
    }
    if (compute)
        live_procs(g, procs, &n);
    if (compute && g->reported_procs && !infos) {
        /* a broken size query: this many processes, then the real list */
        *infoCount = g->reported_procs;
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    } else if (*infoCount < (unsigned int)n || (n > 0 && !infos)) {
        *infoCount = (unsigned int)n;
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        for (int i = 0; i < n; i++) {
            if (version == 1) {
                nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
                p->pid = procs[i].pid;
                p->usedGpuMemory = procs[i].mib * MIB;
            } else {
                nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
                p->pid = procs[i].pid;
                p->usedGpuMemory = procs[i].mib * MIB;
                p->gpuInstanceId = 0xFFFFFFFFU; /* no MIG */
                p->computeInstanceId = 0xFFFFFFFFU;
            }
        }
        *infoCount = (unsigned int)n;
        rc = NVML_SUCCESS;
    }
    free(procs);
    free(st);
    return rc;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{
    return running_processes(device, infoCount, infos, 3, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{
    return running_processes(device, infoCount, infos, 2, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvmlProcessInfo_v1_t *infos)
{
    return running_processes(device, infoCount, infos, 1, 1);
}

/* The simulated hosts run no graphics or MPS clients. */
NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_v2_t *infos)
{
    return running_processes(device, infoCount, infos, 3, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                               nvmlProcessInfo_v2_t *infos)
{
    return running_processes(device, infoCount, infos, 2, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_v2_t *infos)
{
    return running_processes(device, infoCount, infos, 3, 0);
}

/* ---- health ------------------------------------------------------------ */

/* begin_device, then NOT_SUPPORTED when `unsupported=` names the field */
static nvmlReturn_t begin_field(nvmlDevice_t device, unsigned int field, state_t **st, gpu_t **g)
{
    nvmlReturn_t rc = begin_device(device, st, g);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((*g)->unsupported & field) {
        free(*st);
        *st = NULL;
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

/* One unsigned int reading of the GPU (the getters below). */
typedef unsigned int (*uint_getter)(const gpu_t *g);

static nvmlReturn_t get_uint(nvmlDevice_t device, unsigned int field, uint_getter get, unsigned int *out)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, field, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *out = get(g);
    free(st);
    return NVML_SUCCESS;
}

static unsigned int get_power(const gpu_t *g) { return g->power_mw; }
static unsigned int get_power_limit(const gpu_t *g) { return g->power_limit_mw; }
static unsigned int get_pcie_gen(const gpu_t *g) { return g->pcie_gen; }
static unsigned int get_pcie_width(const gpu_t *g) { return g->pcie_width; }
/* the most the link can do: the lower of the GPU's and the slot's maximum */
static unsigned int get_pcie_max_gen(const gpu_t *g) { return g->pcie_max_gen; }
static unsigned int get_pcie_max_width(const gpu_t *g) { return g->pcie_max_width; }
static unsigned int get_pcie_gpu_max_gen(const gpu_t *g) { return g->pcie_gpu_max_gen; }
static unsigned int get_persistence(const gpu_t *g) { return (unsigned int)g->persistence_mode; }
static unsigned int get_retired_pending(const gpu_t *g) { return (unsigned int)g->retired_pages_pending; }

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return get_uint(device, FIELD_POWER, get_power, power);
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return get_uint(device, FIELD_POWER_LIMIT, get_power_limit, limit);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return get_uint(device, FIELD_PCIE | FIELD_PCIE_GEN, get_pcie_gen, currLinkGen);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return get_uint(device, FIELD_PCIE, get_pcie_width, currLinkWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return get_uint(device, FIELD_PCIE | FIELD_PCIE_GEN, get_pcie_max_gen, maxLinkGen);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return get_uint(device, FIELD_PCIE, get_pcie_max_width, maxLinkWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    return get_uint(device, FIELD_PCIE | FIELD_PCIE_GEN, get_pcie_gpu_max_gen, maxLinkGenDevice);
}

/* nvmlEnableState_t: 0 disabled, 1 enabled */
NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode)
{
    return get_uint(device, FIELD_PERSISTENCE, get_persistence, mode);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int *isPending)
{
    return get_uint(device, FIELD_RETIRED_PAGES, get_retired_pending, isPending);
}

NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, FIELD_ECC_MODE, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *current = (unsigned int)g->ecc_mode;
    *pending = (unsigned int)g->ecc_pending_mode;
    free(st);
    return NVML_SUCCESS;
}

/* errorType 0 corrected, 1 uncorrected; counterType 0 volatile, 1 aggregate.
   With ECC off the counters are not kept: NOT_SUPPORTED, as nvidia-smi's N/A. */
NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int errorType,
                                                  unsigned int counterType, unsigned long long *eccCounts)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!eccCounts || errorType > 1 || counterType > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, FIELD_ECC, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!g->ecc_mode) {
        free(st);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (errorType == 1)
        *eccCounts = counterType == 0 ? g->ecc_uncorrected_volatile : g->ecc_uncorrected_aggregate;
    else
        *eccCounts = counterType == 0 ? g->ecc_corrected_volatile : g->ecc_corrected_aggregate;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                                unsigned int *isPending, unsigned int *failureOccurred)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, FIELD_REMAPPED_ROWS, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *corrRows = g->remapped_corrected;
    *uncRows = g->remapped_uncorrected;
    *isPending = g->remapped_pending;
    *failureOccurred = g->remapped_failure;
    free(st);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!reasons)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, FIELD_CLOCKS, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (g->clock_seq_n > 0) {
        unsigned int n = __atomic_fetch_add(&g_clock_reads[device->index], 1U, __ATOMIC_SEQ_CST);
        *reasons = g->clock_seq[n < (unsigned int)g->clock_seq_n ? n : (unsigned int)g->clock_seq_n - 1];
    } else {
        *reasons = g->clocks_event_reasons;
    }
    free(st);
    return NVML_SUCCESS;
}

/* the older name of the same call */
NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

/* sensorType 0 (NVML_TEMPERATURE_GPU) is the only sensor */
NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!temp || sensorType != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, FIELD_TEMPERATURE, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    *temp = g->temperature_c;
    free(st);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

#define nvmlTemperature_v1 NVML_STRUCT_VERSION(sizeof(nvmlTemperature_v1_t), 1)

NVML_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
    unsigned int t = 0;
    nvmlReturn_t rc;
    state_t *st;
    gpu_t *g;
    if (!temperature)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* temperature_v=0: a driver older than the call (pynvml then raises FunctionNotFound, as for a missing symbol) */
    rc = begin_device(device, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    rc = st->temperature_v ? NVML_SUCCESS : NVML_ERROR_FUNCTION_NOT_FOUND;
    free(st);
    if (rc != NVML_SUCCESS)
        return rc;
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = nvmlDeviceGetTemperature(device, temperature->sensorType, &t);
    if (rc == NVML_SUCCESS)
        temperature->temperature = (int)t;
    return rc;
}

/* thresholdType 0 shutdown, 1 slowdown, 3 GPU max (the slowdown temperature here); others NOT_SUPPORTED */
NVML_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, unsigned int thresholdType,
                                                        unsigned int *temp)
{
    state_t *st;
    gpu_t *g;
    nvmlReturn_t rc;
    if (!temp)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = begin_field(device, FIELD_TEMP_THRESHOLD, &st, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (thresholdType == 0)
        *temp = g->temperature_shutdown_c;
    else if (thresholdType == 1 || thresholdType == 3)
        *temp = g->temperature_slowdown_c;
    else
        rc = NVML_ERROR_NOT_SUPPORTED;
    free(st);
    return rc;
}
