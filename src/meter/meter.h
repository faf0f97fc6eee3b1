/* Internal header of the meter module: the public API is include/eerl/meter.h; nothing else in
 * the library reaches into the meter's ring or per-GPU bookkeeping. */
#ifndef EERL__METER_H
#define EERL__METER_H

#include "eerl/meter.h"

#endif
