/* Runs a fuzz target over the files named on the command line (or every
 * file of the directories named), as a regression test without libFuzzer.
 * Prints one TAP line per input. */
#include "config.h"

#include "fuzz.h"
#include "util/util.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

static int n;

static void run_file(const char *path) {
  _cleanup_free_ char *buf = NULL;
  size_t len = 0;
  agsx_error_t err = NULL;
  if (agsx_read_file_at(AT_FDCWD, path, 64u << 20, &buf, &len, &err) < 0) {
    printf("not ok %d - %s: %s\n", ++n, path, err->msg);
    agsx_error_free(&err);
    return;
  }
  LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
  printf("ok %d - %s\n", ++n, path);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      _cleanup_dir_ DIR *d = opendir(argv[i]);
      struct dirent *de;
      while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
          continue;
        _cleanup_free_ char *p = xasprintf("%s/%s", argv[i], de->d_name);
        run_file(p);
      }
    } else {
      run_file(argv[i]);
    }
  }
  printf("1..%d\n", n);
  return 0;
}
