/* The twin's device view: an eerl_device (backend "twin") over a simulated run, so code written
 * for real GPUs (meter, actuator, controller) runs on the twin unchanged. Declared in
 * include/eerl/tools/twin.h (eerl_twin_device); this header only documents the module. The device
 * borrows the twin and must be freed first; it keeps no state of its own besides the handle. */
#ifndef EERL_TWIN_DEVICE_H
#define EERL_TWIN_DEVICE_H

#include "eerl/tools/twin.h"

#endif
