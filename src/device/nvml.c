/* NVML backend: placeholder until the dlopen backend lands. */
#include "eerl/error.h"
#include "device/device_impl.h"

int eerl_device_open_nvml(eerl_device **ret_dev)
{
    (void)ret_dev;
    return EERL_ENODRIVER;
}
