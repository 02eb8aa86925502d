/* Baseline client: DEALER to the broker's front.
 *   lat: one request in flight; WARMUP untimed, then COUNT timed round trips.
 *   thr: INFLIGHT requests in flight; WARMUP_MS, then MEASURE_MS counted.
 * Over the measured phase it samples the CPU time (utime + stime) and the context switches
 * (voluntary + involuntary, all threads) of itself and of PIDS (comma-separated) from /proc,
 * and prints one JSON line.
 *   cnt: INFLIGHT requests in flight until COUNT are answered (for counting instructions
 *        under callgrind, where time means nothing); prints the count.
 *   paced: the least a durable job can cost, as a load beside the others (the floor under
 *        `skybench --jobs`' "scan beside a durable load"): RATE jobs a second until SIGTERM,
 *        each one RECORD-byte record written to FILE and fdatasync'd (a submit on disk), then
 *        one request through the chain (as many messages as a Sky job's submit and its
 *        execution: client -> broker -> worker -> broker -> client). Replies are not awaited
 *        before the next job is due. Prints the jobs answered, the rate and its own CPU.
 * SKY_BASELINE_EXTRA_FRAMES=N (0 to 4, default 0) puts N small frames between the sequence
 * number and the payload, which the broker and the worker pass along like the others: with 4,
 * every message carries as many frames as Sky's protocol does (a client sends and receives 6,
 * the broker moves 30 per task against Sky's 29), to measure what the frame count alone costs.
 * Usage: sky-baseline-client ENDPOINT lat PAYLOAD COUNT WARMUP PIDS
 *        sky-baseline-client ENDPOINT thr PAYLOAD INFLIGHT WARMUP_MS MEASURE_MS PIDS
 *        sky-baseline-client ENDPOINT cnt PAYLOAD INFLIGHT COUNT -
 *        sky-baseline-client ENDPOINT paced PAYLOAD RATE FILE RECORD */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

#define MAX_PIDS 16

static int pids[MAX_PIDS];
static int pid_count = 0;
static double cpu_start[MAX_PIDS];
static long switches_start[MAX_PIDS];

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* utime + stime of a process (all its threads, living and gone), in seconds. */
static double cpu_seconds(int pid) {
    char path[64], buffer[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *file = fopen(path, "r");
    if (!file) return -1;
    size_t n = fread(buffer, 1, sizeof buffer - 1, file);
    fclose(file);
    buffer[n] = 0;
    char *field = strrchr(buffer, ')');
    if (!field) return -1;
    unsigned long utime = 0, stime = 0;
    /* After ")": state is field 3; utime and stime are fields 14 and 15. */
    if (sscanf(field + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* Context switches of every living thread of a process, voluntary and involuntary. */
static long context_switches(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *tasks = opendir(path);
    if (!tasks) return -1;
    long total = 0;
    for (struct dirent *entry = readdir(tasks); entry; entry = readdir(tasks)) {
        if (entry->d_name[0] == '.') continue;
        char status[300];
        snprintf(status, sizeof status, "/proc/%d/task/%s/status", pid, entry->d_name);
        FILE *file = fopen(status, "r");
        if (!file) continue;
        while (fgets(line, sizeof line, file)) {
            long value;
            if (sscanf(line, "voluntary_ctxt_switches: %ld", &value) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %ld", &value) == 1)
                total += value;
        }
        fclose(file);
    }
    closedir(tasks);
    return total;
}

static void parse_pids(const char *list) {
    pids[pid_count++] = getpid();
    char *copy = strdup(list), *save = NULL;
    for (char *token = strtok_r(copy, ",", &save); token && pid_count < MAX_PIDS; token = strtok_r(NULL, ",", &save))
        if (atoi(token) > 0) pids[pid_count++] = atoi(token);
    free(copy);
}

static void cpu_begin(void) {
    for (int i = 0; i < pid_count; i++) {
        cpu_start[i] = cpu_seconds(pids[i]);
        switches_start[i] = context_switches(pids[i]);
    }
}

static void cpu_print(void) {
    printf("\"cpu\":{");
    for (int i = 0; i < pid_count; i++)
        printf("%s\"%d\":%.4f", i ? "," : "", pids[i], cpu_seconds(pids[i]) - cpu_start[i]);
    printf("},\"switches\":{");
    for (int i = 0; i < pid_count; i++)
        printf("%s\"%d\":%ld", i ? "," : "", pids[i], context_switches(pids[i]) - switches_start[i]);
    printf("}");
}

/* The sizes of the extra frames stand for Sky's signature, command, header and service name. */
static const size_t extra_sizes[4] = {6, 1, 10, 8};
static int extra_frames = 0;

static void send_request(void *socket, uint64_t seq, const void *payload, size_t size) {
    static const char filler[16] = "SKYC01";
    if (zmq_send(socket, &seq, sizeof seq, ZMQ_SNDMORE) < 0) die("send");
    for (int i = 0; i < extra_frames; i++)
        if (zmq_send(socket, filler, extra_sizes[i], ZMQ_SNDMORE) < 0) die("send");
    if (zmq_send(socket, payload, size, 0) < 0) die("send");
}

/* Waits for one reply (5 s at most) and returns its sequence number. */
static uint64_t receive_reply(void *socket) {
    zmq_msg_t msgs[MAX_FRAMES];
    int count = recv_message(socket, msgs, 0);
    if (count <= 0) die("no reply within 5 s");
    if (count != 2 + extra_frames) {
        fprintf(stderr, "a reply had %d frames, not %d: the broker or the worker dropped frames\n", count,
                2 + extra_frames);
        exit(1);
    }
    uint64_t seq = 0;
    if (count >= 1 && zmq_msg_size(&msgs[0]) == sizeof seq) memcpy(&seq, zmq_msg_data(&msgs[0]), sizeof seq);
    for (int i = 0; i < count; i++) zmq_msg_close(&msgs[i]);
    return seq;
}

static volatile sig_atomic_t stop_requested = 0;

static void request_stop(int signal) {
    (void)signal;
    stop_requested = 1;
}

/* The paced load: see the comment at the top. */
static int paced(void *socket, const void *payload, size_t size, long rate, const char *path, long record_size) {
    if (rate < 1 || rate > 100000 || record_size < 1 || record_size > 65536) {
        fprintf(stderr, "paced: RATE must be 1 to 100000 and RECORD 1 to 65536\n");
        return 2;
    }
    int file = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (file < 0) {
        perror(path);
        return 1;
    }
    char *record = calloc(1, (size_t)record_size);
    on_sigterm(request_stop);
    parse_pids("");
    cpu_begin();
    const uint64_t interval = 1000000000u / (uint64_t)rate;
    const off_t wrap = 64 << 20; /* the file stays bounded, as a journal's checkpoints keep it */
    uint64_t started = now_ns(), next = started, seq = 0;
    long sent = 0, answered = 0;
    off_t offset = 0;
    zmq_msg_t msgs[MAX_FRAMES];
    while (!stop_requested) {
        uint64_t now = now_ns();
        /* Catch up with the schedule, with at most 1,024 jobs unanswered. */
        while (next <= now && sent - answered < 1024) {
            if (pwrite(file, record, (size_t)record_size, offset) != record_size) die("pwrite");
            offset = offset + record_size >= wrap ? 0 : offset + record_size;
            if (fdatasync(file) != 0) die("fdatasync");
            send_request(socket, ++seq, payload, size);
            sent++;
            next += interval;
        }
        now = now_ns();
        long wait_ms = next > now ? (long)((next - now + 999999) / 1000000) : 0;
        zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
        int ready = zmq_poll(&item, 1, wait_ms > 200 ? 200 : wait_ms);
        if (ready < 0) {
            if (zmq_errno() == EINTR) continue;
            die("zmq_poll");
        }
        if (ready == 0) exit_if_orphaned();
        for (int count; (count = recv_message(socket, msgs, ZMQ_DONTWAIT)) > 0; answered++)
            for (int i = 0; i < count; i++) zmq_msg_close(&msgs[i]);
    }
    double elapsed = (double)(now_ns() - started) / 1e9;
    printf("{\"mode\":\"paced\",\"frames\":%d,\"completed\":%ld,\"elapsed\":%.6f,\"rate\":%.1f,", 2 + extra_frames,
           answered, elapsed, (double)answered / elapsed);
    cpu_print();
    printf("}\n");
    fflush(stdout);
    /* Collect what is still in flight, so the broker's credits come back before the next run. */
    for (; answered < sent; answered++) receive_reply(socket);
    close(file);
    free(record);
    return 0;
}

static int compare(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double percentile_us(uint64_t *sorted, long count, double percentile) {
    long rank = (long)((percentile / 100.0) * (double)count + 0.999999);
    if (rank < 1) rank = 1;
    return (double)sorted[rank - 1] / 1000.0;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: see the comment at the top of client.c\n");
        return 2;
    }
    const char *extra = getenv("SKY_BASELINE_EXTRA_FRAMES");
    if (extra) {
        char *end = NULL;
        long value = strtol(extra, &end, 10);
        extra_frames = (int)value;
        if (*extra == '\0' || *end != '\0' || value < 0 || value > 4) {
            fprintf(stderr, "SKY_BASELINE_EXTRA_FRAMES must be 0 to 4, not %s\n", extra);
            return 2;
        }
    }
    const char *mode = argv[2];
    size_t size = (size_t)atol(argv[3]);
    void *payload = calloc(1, size ? size : 1);
    void *context = zmq_ctx_new();
    void *socket = connected_dealer(context, argv[1], 0, 5000);

    if (strcmp(mode, "lat") == 0) {
        long count = atol(argv[4]), warmup = atol(argv[5]);
        parse_pids(argv[6]);
        uint64_t *samples = malloc(sizeof(uint64_t) * (size_t)count);
        uint64_t seq = 0;
        for (long i = 0; i < warmup; i++) {
            send_request(socket, ++seq, payload, size);
            if (receive_reply(socket) != seq) die("reply out of order");
        }
        cpu_begin();
        uint64_t started = now_ns();
        for (long i = 0; i < count; i++) {
            uint64_t sent = now_ns();
            send_request(socket, ++seq, payload, size);
            if (receive_reply(socket) != seq) die("reply out of order");
            samples[i] = now_ns() - sent;
        }
        double elapsed = (double)(now_ns() - started) / 1e9;
        qsort(samples, (size_t)count, sizeof *samples, compare);
        double sum = 0;
        for (long i = 0; i < count; i++) sum += (double)samples[i];
        printf("{\"mode\":\"lat\",\"frames\":%d,", 2 + extra_frames);
        printf("\"count\":%ld,\"elapsed\":%.6f,\"p50\":%.2f,\"p99\":%.2f,\"mean\":%.2f,", count, elapsed,
               percentile_us(samples, count, 50), percentile_us(samples, count, 99), sum / (double)count / 1000.0);
        cpu_print();
        printf("}\n");
    } else if (strcmp(mode, "thr") == 0 && argc >= 8) {
        long inflight = atol(argv[4]);
        uint64_t warmup = (uint64_t)atol(argv[5]) * 1000000u, measure = (uint64_t)atol(argv[6]) * 1000000u;
        parse_pids(argv[7]);
        uint64_t seq = 0;
        long outstanding = 0, completed = 0;
        for (; outstanding < inflight; outstanding++) send_request(socket, ++seq, payload, size);
        uint64_t begin = now_ns(), measure_from = begin + warmup, measure_to = measure_from + measure;
        int measuring = 0;
        uint64_t now = begin;
        while (now < measure_to) {
            receive_reply(socket);
            now = now_ns();
            if (!measuring && now >= measure_from) {
                measuring = 1;
                measure_from = now;
                measure_to = now + measure;
                cpu_begin();
            }
            if (measuring) completed++;
            send_request(socket, ++seq, payload, size);
        }
        double elapsed = (double)(now - measure_from) / 1e9;
        printf("{\"mode\":\"thr\",\"frames\":%d,", 2 + extra_frames);
        printf("\"completed\":%ld,\"elapsed\":%.6f,\"rate\":%.1f,", completed, elapsed,
               (double)completed / elapsed);
        cpu_print();
        printf("}\n");
        fflush(stdout);
        /* Collect what is still in flight, so the broker's credits come back before the next run. */
        for (long i = 0; i < outstanding; i++) receive_reply(socket);
    } else if (strcmp(mode, "cnt") == 0) {
        long inflight = atol(argv[4]), count = atol(argv[5]);
        uint64_t seq = 0;
        long outstanding = 0, completed = 0;
        for (; outstanding < inflight && outstanding < count; outstanding++) send_request(socket, ++seq, payload, size);
        while (completed < count) {
            receive_reply(socket);
            completed++;
            if ((long)seq < count) send_request(socket, ++seq, payload, size);
        }
        printf("{\"mode\":\"cnt\",\"completed\":%ld}\n", completed);
    } else if (strcmp(mode, "paced") == 0) {
        int status = paced(socket, payload, size, atol(argv[4]), argv[5], atol(argv[6]));
        if (status != 0) return status;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    fflush(stdout);
    zmq_close(socket);
    zmq_ctx_term(context);
    return 0;
}
