// A fanotify watch of every opening on the root filesystem, for miner-watch-cost.py (lab
// only): events read and dropped, nothing named. Mode "d": events with descriptors (as the
// miner's monitor takes them); "f": with file handles (FAN_REPORT_FID, no descriptor made);
// a second letter "b" reads the queue every 50 ms instead of waking at each event.
//     cc -O2 -o fanotify-watch fanotify-watch.c && ./fanotify-watch fb
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/fanotify.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "d";
    unsigned flags = FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_UNLIMITED_QUEUE;
    if (mode[0] == 'f')
        flags |= FAN_REPORT_FID;
    int fd = fanotify_init(flags, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
    if (fd < 0) {
        perror("fanotify_init");
        return 1;
    }
    if (fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM,
                      FAN_OPEN | FAN_OPEN_EXEC | FAN_ONDIR, AT_FDCWD, "/") < 0) {
        perror("fanotify_mark");
        return 1;
    }
    int batch = mode[0] && mode[1] == 'b';
    char buf[4096] __attribute__((aligned(8)));
    for (;;) {
        if (batch)
            usleep(50000);
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf);
        if (len <= 0)
            continue;
        struct fanotify_event_metadata *m = (void *)buf;
        for (; FAN_EVENT_OK(m, len); m = FAN_EVENT_NEXT(m, len))
            if (m->fd >= 0)
                close(m->fd);
    }
}
