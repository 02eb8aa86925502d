/* Baseline broker: ROUTER for clients, ROUTER for workers, one thread, zmq_poll.
 * Workers announce credits ("READY", n); each request goes to the worker credit that has
 * waited longest; each reply returns the worker's credit. Clients are read only while a credit
 * is free. After every poll it reads every waiting message (ZMQ_DONTWAIT until EAGAIN).
 * Frames: client [id][seq][payload] -> worker [wid][id][seq][payload], and back.
 * Usage: sky-baseline-broker FRONT BACK  (prints "ready FRONT BACK" with the bound endpoints)
 * SIGTERM ends it at its next poll, through a normal exit (which callgrind needs to write its
 * counts: `skybench --instructions`). */
#include "common.h"

static volatile sig_atomic_t stopping = 0;

static void stop(int signal) {
    (void)signal;
    stopping = 1;
}

#define MAX_CREDITS 65536
#define ID_BYTES 256

static unsigned char credit_ids[MAX_CREDITS][ID_BYTES];
static size_t credit_sizes[MAX_CREDITS];
static int credit_head = 0, credit_count = 0;

static void add_credit(const void *id, size_t size) {
    if (credit_count == MAX_CREDITS || size > ID_BYTES) return;
    int slot = (credit_head + credit_count) % MAX_CREDITS;
    memcpy(credit_ids[slot], id, size);
    credit_sizes[slot] = size;
    credit_count++;
}

static void *bound(void *context, int type, const char *endpoint, char *resolved, size_t size) {
    void *socket = zmq_socket(context, type);
    if (!socket) die("zmq_socket");
    set_int(socket, ZMQ_SNDHWM, 100000);
    set_int(socket, ZMQ_RCVHWM, 100000);
    set_int(socket, ZMQ_LINGER, 0);
    if (zmq_bind(socket, endpoint) != 0) die(endpoint);
    if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, resolved, &size) != 0) die("ZMQ_LAST_ENDPOINT");
    return socket;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s FRONT BACK\n", argv[0]);
        return 2;
    }
    void *context = zmq_ctx_new();
    char front_at[256], back_at[256];
    void *front = bound(context, ZMQ_ROUTER, argv[1], front_at, sizeof front_at);
    void *back = bound(context, ZMQ_ROUTER, argv[2], back_at, sizeof back_at);
    printf("ready %s %s\n", front_at, back_at);
    fflush(stdout);

    zmq_msg_t msgs[MAX_FRAMES + 1];
    exit_if_orphaned();
    on_sigterm(stop);
    while (!stopping) {
        zmq_pollitem_t items[2] = {{back, 0, ZMQ_POLLIN, 0}, {front, 0, ZMQ_POLLIN, 0}};
        int ready = zmq_poll(items, credit_count > 0 ? 2 : 1, 200);
        if (ready == 0) exit_if_orphaned();
        if (ready < 0) {
            if (zmq_errno() == EINTR) continue;
            die("zmq_poll");
        }
        /* Workers first: replies free credits that waiting requests can use in this pass. */
        for (;;) {
            int count = recv_message(back, msgs, ZMQ_DONTWAIT);
            if (count <= 0) break;
            size_t id_size = zmq_msg_size(&msgs[0]);
            if (count >= 3 && zmq_msg_size(&msgs[1]) == 5 && memcmp(zmq_msg_data(&msgs[1]), "READY", 5) == 0) {
                char text[16] = {0};
                size_t n = zmq_msg_size(&msgs[2]) < 15 ? zmq_msg_size(&msgs[2]) : 15;
                memcpy(text, zmq_msg_data(&msgs[2]), n);
                int credits = atoi(text);
                for (int i = 0; i < credits; i++) add_credit(zmq_msg_data(&msgs[0]), id_size);
                for (int i = 0; i < count; i++) zmq_msg_close(&msgs[i]);
            } else if (count >= 3) {
                add_credit(zmq_msg_data(&msgs[0]), id_size);
                zmq_msg_close(&msgs[0]);
                send_frames(front, msgs, 1, count);
            } else {
                for (int i = 0; i < count; i++) zmq_msg_close(&msgs[i]);
            }
        }
        while (credit_count > 0) {
            /* Leave room for the worker's id in front of the client's frames. */
            int count = recv_message(front, msgs + 1, ZMQ_DONTWAIT);
            if (count <= 0) break;
            zmq_msg_init_size(&msgs[0], credit_sizes[credit_head]);
            memcpy(zmq_msg_data(&msgs[0]), credit_ids[credit_head], credit_sizes[credit_head]);
            credit_head = (credit_head + 1) % MAX_CREDITS;
            credit_count--;
            send_frames(back, msgs, 0, count + 1);
        }
    }
    zmq_close(front);
    zmq_close(back);
    zmq_ctx_term(context);
    return 0;
}
