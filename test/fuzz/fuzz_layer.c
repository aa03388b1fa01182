/* Fuzz target: layer unpacking (compression sniffing, gzip/zstd, tar
 * parsing and every extraction rule) into a fresh temporary directory.
 * The layer goes into ROOT/dest; afterwards ROOT must hold nothing else,
 * so an escape through `..`, symlinks or hardlinks aborts the run. */
#include "config.h"

#include "fuzz.h"
#include "image/layer.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

static void check_only_dest(int rootfd) {
  _cleanup_dir_ DIR *d = fdopendir(openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct dirent *de;
  if (d == NULL)
    abort();
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
        strcmp(de->d_name, "dest") != 0)
      abort(); /* something was created next to the destination */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const struct agsx_layer_limits lim = {
      .max_bytes = 8 << 20, .max_entries = 10000, .max_path = 4096, .max_depth = 256};
  agsx_log_level = AGSX_LOG_ERROR; /* skipped devices etc. are expected */
  const char *tmp = getenv("TMPDIR");
  _cleanup_free_ char *root = xasprintf("%s/agsx-fuzz-layer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(root) == NULL)
    abort();
  _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0 || mkdirat(rootfd, "dest", 0755) < 0)
    abort();
  _cleanup_close_ int destfd = openat(rootfd, "dest", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (destfd < 0)
    abort();
  char diff_id[AGSX_DIGEST_LEN];
  agsx_error_t err = NULL;
  agsx_layer_unpack_mem(data, size, AGSX_COMPRESSION_AUTO, destfd, &lim, diff_id, &err);
  agsx_error_free(&err);
  check_only_dest(rootfd);
  if (agsx_rm_rf_at(AT_FDCWD, root, &err) < 0)
    abort();
  return 0;
}
