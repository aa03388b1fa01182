/* agsx fuzz targets: each file defines LLVMFuzzerTestOneInput, linked either
 * with libFuzzer or with replay.c (runs the target over files). */
#ifndef AGSX_FUZZ_H
#define AGSX_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
