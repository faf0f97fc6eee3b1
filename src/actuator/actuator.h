/* Internal header of the actuator module: the public API is include/eerl/tools/actuator.h; the
 * registry of live actuators and their per-GPU records are private to actuator.c. */
#ifndef EERL__ACTUATOR_H
#define EERL__ACTUATOR_H

#include "eerl/tools/actuator.h"

#endif
