#include "config.h"
#include "store.h"
