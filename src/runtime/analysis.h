/* Offline trace analysis moved to analysis/analysis.h (it reads traces; it is no part of the
 * runtime session). This forward stays only until the last includes name the new place. */
#ifndef EERL_RUNTIME_ANALYSIS_H
#define EERL_RUNTIME_ANALYSIS_H

#include "analysis/analysis.h"

#endif
