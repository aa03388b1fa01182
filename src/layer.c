#include "config.h"
#include "layer.h"
