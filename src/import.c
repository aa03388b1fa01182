#include "config.h"
#include "import.h"
