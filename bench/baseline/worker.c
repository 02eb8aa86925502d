/* Baseline worker: DEALER, announces CREDITS, echoes every request [id][seq][payload] as is.
 * Usage: sky-baseline-worker BACK CREDITS
 * SIGTERM ends it at its next receive, through a normal exit (which callgrind needs to write its
 * counts: `skybench --instructions`). */
#include "common.h"

static volatile sig_atomic_t stopping = 0;

static void stop(int signal) {
    (void)signal;
    stopping = 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s BACK CREDITS\n", argv[0]);
        return 2;
    }
    void *context = zmq_ctx_new();
    exit_if_orphaned();
    void *socket = connected_dealer(context, argv[1], 100000, 200);
    if (zmq_send(socket, "READY", 5, ZMQ_SNDMORE) < 0 || zmq_send(socket, argv[2], strlen(argv[2]), 0) < 0)
        die("send READY");
    zmq_msg_t msgs[MAX_FRAMES];
    on_sigterm(stop);
    while (!stopping) {
        int count = recv_message(socket, msgs, 0);
        if (count < 0) {
            if (zmq_errno() == EINTR) continue;
            die("receive");
        }
        if (count == 0) {
            exit_if_orphaned(); /* 200 ms without a request */
            continue;
        }
        if (send_frames(socket, msgs, 0, count) != 0) die("send");
    }
    zmq_close(socket);
    zmq_ctx_term(context);
    return 0;
}
