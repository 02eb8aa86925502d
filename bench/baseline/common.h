/* Shared by the plain-libzmq baseline programs that skybench runs beside Sky.
 * The baseline is the same message flow as Sky (client DEALER -> broker ROUTER|ROUTER ->
 * worker DEALER, credit-based) with no application work, so Sky's figures can be read as a
 * ratio of what libzmq allows on the same machine in the same run. */
#ifndef SKY_BASELINE_COMMON_H
#define SKY_BASELINE_COMMON_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#define MAX_FRAMES 8

static inline void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, zmq_strerror(zmq_errno()));
    exit(1);
}

/* skybench sets SKY_EXIT_WITH_PARENT=1: then leave when the parent is gone, so a benchmark
 * that crashed leaves nothing running. Called between waits of at most 200 ms. */
static pid_t parent_at_start = 0;
static inline void exit_if_orphaned(void) {
    const char *flag = getenv("SKY_EXIT_WITH_PARENT");
    if (!flag || strcmp(flag, "1") != 0) return;
    if (parent_at_start == 0) parent_at_start = getppid();
    if (getppid() != parent_at_start) exit(3);
}

/* Calls handler on SIGTERM, without restarting the call it interrupts (zmq_poll and receives
 * return EINTR at once). A Swift parent may start a program with SIGTERM blocked (libdispatch
 * blocks signals in its threads): it is unblocked first. */
static inline void on_sigterm(void (*handler)(int)) {
    sigset_t terminate;
    sigemptyset(&terminate);
    sigaddset(&terminate, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &terminate, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    sigaction(SIGTERM, &action, NULL);
}

static inline void set_int(void *socket, int option, int value) {
    if (zmq_setsockopt(socket, option, &value, sizeof value) != 0) die("zmq_setsockopt");
}

/* A DEALER connected to endpoint: hwm for both queues (0 = none), linger 0, and receives that
 * give up after receive_timeout_ms (EAGAIN). */
static inline void *connected_dealer(void *context, const char *endpoint, int hwm, int receive_timeout_ms) {
    void *socket = zmq_socket(context, ZMQ_DEALER);
    if (!socket) die("zmq_socket");
    set_int(socket, ZMQ_SNDHWM, hwm);
    set_int(socket, ZMQ_RCVHWM, hwm);
    set_int(socket, ZMQ_LINGER, 0);
    set_int(socket, ZMQ_RCVTIMEO, receive_timeout_ms);
    if (zmq_connect(socket, endpoint) != 0) die(endpoint);
    return socket;
}

/* Receives every frame of one message into msgs; returns the frame count, 0 on EAGAIN
 * (non-blocking), -1 on another error. Extra frames beyond MAX_FRAMES are dropped. */
static inline int recv_message(void *socket, zmq_msg_t *msgs, int flags) {
    int count = 0;
    for (;;) {
        zmq_msg_t scratch;
        zmq_msg_t *msg = count < MAX_FRAMES ? &msgs[count] : &scratch;
        zmq_msg_init(msg);
        if (zmq_msg_recv(msg, socket, count == 0 ? flags : 0) < 0) {
            int error = zmq_errno();
            zmq_msg_close(msg);
            for (int i = 0; i < count && i < MAX_FRAMES; i++) zmq_msg_close(&msgs[i]);
            return error == EAGAIN ? 0 : -1;
        }
        int more = zmq_msg_more(msg);
        if (count < MAX_FRAMES) count++; else zmq_msg_close(msg);
        if (!more) return count;
    }
}

/* Sends frames[from..<count] (taking ownership of them) as one message. */
static inline int send_frames(void *socket, zmq_msg_t *msgs, int from, int count) {
    for (int i = from; i < count; i++) {
        if (zmq_msg_send(&msgs[i], socket, i + 1 < count ? ZMQ_SNDMORE : 0) < 0) {
            for (int j = i; j < count; j++) zmq_msg_close(&msgs[j]);
            return -1;
        }
    }
    return 0;
}

#endif
