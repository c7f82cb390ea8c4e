/* Umbrella header of the CSpindle module (what Swift imports). */
#include "spindle.h"
#include "spindle_sync.h"
#include "spindle_topology.h"
