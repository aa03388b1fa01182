/* Unit tests: bounded framed logs (sandbox/logbuf.h). */
#include "config.h"

#include "sandbox/logbuf.h"
#include "util/inotify.h"
#include "tap.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int tmp;

static struct agsx_log_writer *wopen(const char *name, uint64_t cap) {
  struct agsx_log_writer *w = NULL;
  agsx_error_t err = NULL;
  if (agsx_log_writer_open(tmp, name, cap, &w, &err) < 0) {
    printf("# writer: %s\n", err->msg);
    exit(1);
  }
  return w;
}

static struct agsx_log_reader *ropen(const char *name, uint64_t from) {
  struct agsx_log_reader *r = NULL;
  agsx_error_t err = NULL;
  if (agsx_log_reader_open(tmp, name, from, &r, &err) < 0) {
    printf("# reader: %s\n", err->msg);
    exit(1);
  }
  return r;
}

static void put(struct agsx_log_writer *w, enum agsx_log_kind k, const char *s) {
  agsx_error_t err = NULL;
  if (agsx_log_write(w, k, s, strlen(s), &err) < 0) {
    printf("# write: %s\n", err->msg);
    exit(1);
  }
}

static int next(struct agsx_log_reader *r, struct agsx_log_rec *rec) {
  agsx_error_t err = NULL;
  int n = agsx_log_next(r, rec, &err);
  agsx_error_free(&err);
  return n;
}

static bool is_rec(struct agsx_log_reader *r, enum agsx_log_kind k, const char *s) {
  struct agsx_log_rec rec;
  return next(r, &rec) == 1 && rec.kind == k && rec.len == strlen(s) &&
         memcmp(rec.data, s, rec.len) == 0;
}

static void basics(void) {
  struct agsx_log_writer *w = wopen("basic", 1 << 20);
  struct agsx_log_reader *r = ropen("basic", AGSX_LOG_FROM_START);
  struct agsx_log_rec rec;
  tap_is_int(next(r, &rec), 0, "empty log: nothing yet");
  put(w, AGSX_LOG_STDOUT, "hello\n");
  put(w, AGSX_LOG_STDERR, "oops\n");
  put(w, AGSX_LOG_META, "warning");
  tap_ok(is_rec(r, AGSX_LOG_STDOUT, "hello\n"), "stdout record");
  uint64_t resume = agsx_log_reader_offset(r);
  tap_is_int(resume, AGSX_LOG_HDR + 6, "offsets count record bytes");
  tap_ok(is_rec(r, AGSX_LOG_STDERR, "oops\n"), "stderr record");
  tap_ok(is_rec(r, AGSX_LOG_META, "warning"), "meta record");
  tap_is_int(next(r, &rec), 0, "then nothing yet");
  struct agsx_log_reader *late = ropen("basic", AGSX_LOG_FROM_END);
  struct agsx_log_reader *mid = ropen("basic", resume);
  tap_ok(is_rec(mid, AGSX_LOG_STDERR, "oops\n"), "a reader from an offset resumes there");
  put(w, AGSX_LOG_STDOUT, "after");
  tap_ok(is_rec(late, AGSX_LOG_STDOUT, "after"), "from the end: only what came after");
  agsx_error_t err = NULL;
  tap_is_int(agsx_log_end(w, 3, 0, "it failed", &err), 0, "end written");
  tap_ok(agsx_log_write(w, AGSX_LOG_STDOUT, "x", 1, &err) < 0 && agsx_error_errno(&err) == EPIPE,
         "no writes after the end");
  agsx_error_free(&err);
  tap_ok(is_rec(r, AGSX_LOG_STDOUT, "after"), "the last record before the end");
  int n = next(r, &rec);
  tap_ok(n == 2 && rec.kind == AGSX_LOG_END && rec.exit_code == 3 && rec.term_signal == 0 &&
             rec.error && strcmp(rec.error, "it failed") == 0,
         "the end: exit code and error (%d)", n);
  tap_is_int(next(r, &rec), 2, "and again the end");
  agsx_log_writer_free(w);
  agsx_log_reader_free(r);
  agsx_log_reader_free(late);
  agsx_log_reader_free(mid);
}

static uint64_t dir_bytes(const char *name) {
  int fd = openat(tmp, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fdopendir(fd);
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    if (e->d_name[0] != '.' && fstatat(fd, e->d_name, &st, 0) == 0)
      sum += (uint64_t)st.st_size;
  }
  closedir(d);
  return sum;
}

static void wrap(void) {
  const uint64_t cap = 64 << 10;
  struct agsx_log_writer *w = wopen("wrap", cap);
  struct agsx_log_reader *slow = ropen("wrap", AGSX_LOG_FROM_START);
  char line[1001];
  memset(line, 'a', 1000);
  line[1000] = '\0';
  put(w, AGSX_LOG_STDOUT, "first");
  tap_ok(is_rec(slow, AGSX_LOG_STDOUT, "first"), "the slow reader read one");
  uint64_t max = 0;
  for (int i = 0; i < 1000; i++) {
    snprintf(line, 12, "%010d", i);
    line[10] = 'a';
    put(w, AGSX_LOG_STDOUT, line);
    uint64_t b = dir_bytes("wrap");
    max = b > max ? b : max;
  }
  tap_ok(max <= cap + AGSX_LOG_HDR + 1000, "at most the cap on disk (%llu <= %llu)",
         (unsigned long long)max, (unsigned long long)cap);
  /* It still reads the segment it has open (dropped meanwhile), then
   * learns what it missed, then reads on. */
  struct agsx_log_rec rec;
  int got = 0, last = -1, losts = 0;
  uint64_t lost = 0, skipped = 0;
  bool ordered = true;
  while (next(slow, &rec) == 1) {
    if (rec.kind == AGSX_LOG_LOST) {
      losts++;
      lost = rec.lost;
      skipped = lost / (AGSX_LOG_HDR + 1000);
      continue;
    }
    int v = atoi(rec.data);
    ordered = ordered && rec.kind == AGSX_LOG_STDOUT && (last < 0 || v == last + 1 + (int)skipped);
    skipped = 0;
    last = v;
    got++;
  }
  tap_ok(losts == 1 && lost > 0 && lost % (AGSX_LOG_HDR + 1000) == 0,
         "a reader that fell behind: one LOST (%llu bytes = whole records)",
         (unsigned long long)lost);
  tap_ok(ordered && last == 999 && got > 20,
         "records in order around it, the gap what LOST said (%d, last %d)", got, last);
  struct agsx_log_reader *fresh = ropen("wrap", AGSX_LOG_FROM_START);
  tap_ok(next(fresh, &rec) == 1 && rec.kind == AGSX_LOG_LOST, "from the start: LOST first");
  agsx_log_reader_free(fresh);
  /* One write larger than a record is split. */
  size_t big = AGSX_LOG_REC_MAX + 100;
  char *b = malloc(big);
  memset(b, 'z', big);
  agsx_error_t err = NULL;
  tap_is_int(agsx_log_write(w, AGSX_LOG_STDERR, b, big, &err), 0, "a large write");
  size_t total = 0;
  while (next(slow, &rec) == 1)
    total += rec.kind == AGSX_LOG_STDERR ? rec.len : 0;
  tap_is_int(total, big, "comes back whole, in pieces");
  free(b);
  agsx_log_writer_free(w);
  agsx_log_reader_free(slow);
}

/* A writer in another process; the reader follows it through inotify. */
static void follow(void) {
  struct agsx_log_writer *w = wopen("follow", 1 << 20);
  struct agsx_log_reader *r = ropen("follow", AGSX_LOG_FROM_START);
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 50; i++) {
      char s[16];
      snprintf(s, sizeof(s), "%d", i);
      put(w, AGSX_LOG_STDOUT, s);
      usleep(2000);
    }
    agsx_log_end(w, 0, 9, NULL, NULL);
    _exit(0);
  }
  int got = 0, polls = 0, n;
  struct agsx_log_rec rec;
  while ((n = next(r, &rec)) != 2 && polls < 1000) {
    if (n == 1) {
      got++;
      continue;
    }
    struct pollfd p = {.fd = agsx_log_reader_fd(r), .events = POLLIN};
    poll(&p, 1, 5000);
    polls++;
  }
  waitpid(pid, NULL, 0);
  tap_ok(n == 2 && got == 50 && rec.term_signal == 9 && rec.error == NULL,
         "followed a live writer to its end (%d records, %d polls)", got, polls);
  agsx_log_writer_free(w);
  agsx_log_reader_free(r);
}

/* A writer that died in the middle of a record. */
static void torn(void) {
  struct agsx_log_writer *w = wopen("torn", 1 << 20);
  put(w, AGSX_LOG_STDOUT, "one");
  put(w, AGSX_LOG_STDOUT, "two");
  agsx_log_writer_free(w);
  int fd = openat(tmp, "torn/0000000000000000", O_WRONLY | O_APPEND | O_CLOEXEC);
  const unsigned char part[] = {1, 0, 0, 0, 200, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 'x', 'y'};
  tap_ok(fd >= 0 && write(fd, part, sizeof(part)) == (ssize_t)sizeof(part), "a torn record");
  close(fd);
  struct agsx_log_reader *r = ropen("torn", AGSX_LOG_FROM_START);
  struct agsx_log_rec rec;
  tap_ok(is_rec(r, AGSX_LOG_STDOUT, "one") && is_rec(r, AGSX_LOG_STDOUT, "two"),
         "the whole records");
  tap_is_int(next(r, &rec), 0, "the torn one is not returned");
  w = wopen("torn", 1 << 20);
  put(w, AGSX_LOG_STDOUT, "three");
  tap_ok(is_rec(r, AGSX_LOG_STDOUT, "three"), "a new writer cut it off and continues");
  agsx_log_end(w, 0, 0, NULL, NULL);
  tap_is_int(next(r, &rec), 2, "then the end");
  agsx_log_writer_free(w);
  agsx_log_reader_free(r);
}

/* Garbage the reader must survive: it never crashes, loops or returns it. */
static void hostile(void) {
  mkdirat(tmp, "bad", 0700);
  int d = openat(tmp, "bad", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int fd = openat(d, "0000000000000000", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  unsigned char junk[64];
  memset(junk, 0xff, sizeof(junk));
  tap_ok(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk), "a segment of garbage");
  close(fd);
  mkdirat(d, "0000000000000100", 0700);
  fd = openat(d, "end", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  tap_ok(write(fd, "nonsense", 8) == 8, "an end of garbage");
  close(fd);
  tap_ok(symlinkat("/etc/passwd", d, "0000000000000200") == 0, "a segment that is a symlink");
  struct agsx_log_reader *r = ropen("bad", AGSX_LOG_FROM_START);
  struct agsx_log_rec rec;
  int n = 0, ret;
  while ((ret = next(r, &rec)) == 1 && n < 100)
    n++;
  tap_ok(ret == 0 && n < 100, "garbage: no records (%d), no end, no loop", n);
  agsx_log_reader_free(r);
  close(d);
}

/* Readers of a process that shares a hub take no instance of their own:
 * the hub's fd wakes for any of their logs, each still reads only its own,
 * and the hub holds one watch per log however many follow it. */
static void shared(void) {
  struct agsx_inotify *hub = NULL;
  struct agsx_inotify_budget b = {.instances = 2, .watches = 64};
  agsx_error_t err = NULL;
  tap_ok(agsx_inotify_new(&b, &hub, &err) == 0, "a hub");
  agsx_log_readers_share(hub);
  struct agsx_log_writer *a = wopen("share-a", 1 << 20), *w = wopen("share-b", 1 << 20);
  struct agsx_log_reader *ra = ropen("share-a", AGSX_LOG_FROM_START);
  struct agsx_log_reader *ra2 = ropen("share-a", AGSX_LOG_FROM_START);
  struct agsx_log_reader *rb = ropen("share-b", AGSX_LOG_FROM_START);
  tap_ok(agsx_log_reader_fd(ra) == -1 && agsx_log_reader_fd(rb) == -1, "no fd of their own");
  unsigned insts = 0, watches = 0;
  agsx_inotify_usage(hub, NULL, &insts, &watches, NULL);
  tap_ok(insts == 1 && watches == 2, "one instance, a watch per log (%u, %u)", insts, watches);
  put(a, AGSX_LOG_STDOUT, "for a");
  struct pollfd p = {.fd = agsx_inotify_fd(hub), .events = POLLIN};
  tap_ok(poll(&p, 1, 2000) == 1, "the hub's fd wakes");
  agsx_inotify_dispatch(hub);
  struct agsx_log_rec rec;
  tap_ok(is_rec(ra, AGSX_LOG_STDOUT, "for a") && is_rec(ra2, AGSX_LOG_STDOUT, "for a"),
         "both readers of a read it");
  tap_is_int(next(rb, &rec), 0, "b's reader reads nothing of a's");
  agsx_log_reader_free(ra);
  agsx_log_reader_free(ra2);
  agsx_log_reader_free(rb);
  agsx_inotify_usage(hub, NULL, NULL, &watches, NULL);
  tap_is_int((int)watches, 0, "freed readers leave no watch");
  agsx_log_readers_share(NULL);
  agsx_inotify_free(hub);
  agsx_log_writer_free(a);
  agsx_log_writer_free(w);
}

int main(void) {
  char dir[] = "/tmp/test_logbuf.XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  tmp = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  basics();
  wrap();
  follow();
  torn();
  hostile();
  shared();
  agsx_error_t err = NULL;
  agsx_rm_rf_at(AT_FDCWD, dir, &err);
  agsx_error_free(&err);
  return tap_done();
}
