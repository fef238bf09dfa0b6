/*
 * dist/launcher/awlrun.c - starts the ranks of a distributed job, as
 * torchrun does, and never leaves one behind.
 *
 *     awlrun -n 4 ./build/train_gpt --data input.txt        # 4 ranks on this host
 *     awlrun --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \
 *            --token secret -n 8 ./build/train_gpt ...        # host 0 of 2 (and --node-rank 1 on the other)
 *
 * Each rank is the program with torchrun's variables set (RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), the job token
 * (AWL_JOB_TOKEN: random per launch, so connections from another job are
 * refused), and OMP_NUM_THREADS (the host's cores shared out, unless set).
 * Each rank's lines come out prefixed "[rank K] ", stdout to stdout and
 * stderr to stderr.
 *
 * When a rank fails (a non-zero exit or a signal), awlrun says which rank
 * failed first and how, shows its last lines of stderr, stops the others
 * (SIGTERM, then SIGKILL after the grace period) and exits with that rank's
 * status. "First" is the cause, not merely the first exit: a rank whose
 * process group broke tells awlrun whom it blames (one line on the pipe
 * AWLRUN_REPORT_FD names), because a peer can notice a dead rank, fail
 * and exit before the dead rank's own exit is complete.
 * SIGINT and SIGTERM are passed on to every rank (once: the ranks run in
 * a process group of their own, so a terminal's Ctrl-C reaches only
 * awlrun). If awlrun itself is killed, the kernel kills the ranks
 * (PR_SET_PDEATHSIG), so no rank outlives it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 256
#define TAIL_LINES 12
#define LINE_MAX_BYTES 4096

typedef struct options {
    int nproc, nnodes, node_rank, master_port, threads;
    double grace;
    const char *master_addr, *token;
    bool bind, prefix;
    char **argv; /* the program and its arguments */
} options;

typedef struct stream {
    int fd;           /* the pipe's read end, -1 once closed */
    FILE *out;        /* where its lines go */
    char line[LINE_MAX_BYTES];
    size_t len;
} stream;

typedef struct rank_proc {
    int rank;
    pid_t pid;
    bool running;
    int status;          /* waitpid's */
    double ended;
    int blamed;          /* the rank its first awl_dist failure blamed (-1: none, -2: no report) */
    stream out, err;
    char tail[TAIL_LINES][256]; /* the last lines of its stderr */
    int tail_next, tail_count;
} rank_proc;

static int signal_pipe[2] = {-1, -1};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char s = (unsigned char)sig;
    ssize_t ignored = write(signal_pipe[1], &s, 1);
    (void)ignored;
    errno = saved;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: awlrun -n N [options] program [args...]\n\n"
            "Starts N ranks of program on this host with RANK, WORLD_SIZE, LOCAL_RANK,\n"
            "LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and AWL_JOB_TOKEN set.\n\n"
            "  -n, --nproc-per-node N   ranks on this host (required)\n"
            "  --nnodes N               hosts in the job (default 1)\n"
            "  --node-rank K            this host's index, 0..nnodes-1 (default 0)\n"
            "  --master-addr HOST       the host of rank 0 (default 127.0.0.1)\n"
            "  --master-port P          rank 0's store port (default: a free port; required\n"
            "                           with --nnodes > 1)\n"
            "  --token T                the job token (default: random; with --nnodes > 1 give\n"
            "                           every host the same one, or set AWL_JOB_TOKEN)\n"
            "  --threads N              OMP_NUM_THREADS per rank (default: the host's cores\n"
            "                           divided among its ranks; a set OMP_NUM_THREADS wins)\n"
            "  --no-bind                do not pin each rank to its own cores\n"
            "  --grace S                seconds between SIGTERM and SIGKILL (default 3)\n"
            "  --no-prefix              do not prefix output lines with [rank K]\n"
            "  -h, --help               this help\n");
}

static bool parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* Returns 0, 1 (help printed) or 2 (error printed). */
static int parse(int argc, char **argv, options *o)
{
    *o = (options){.nproc = 0, .nnodes = 1, .node_rank = 0, .master_port = 0, .threads = 0,
                   .grace = 3.0, .master_addr = "127.0.0.1", .token = NULL, .bind = true,
                   .prefix = true, .argv = NULL};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') break;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(a, "--no-bind") == 0) {
            o->bind = false;
            continue;
        }
        if (strcmp(a, "--no-prefix") == 0) {
            o->prefix = false;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "awlrun: %s needs a value (see --help)\n", a);
            return 2;
        }
        bool ok = true;
        if (strcmp(a, "-n") == 0 || strcmp(a, "--nproc-per-node") == 0)
            ok = parse_int(v, 1, MAX_RANKS, &o->nproc);
        else if (strcmp(a, "--nnodes") == 0)
            ok = parse_int(v, 1, 4096, &o->nnodes);
        else if (strcmp(a, "--node-rank") == 0)
            ok = parse_int(v, 0, 4095, &o->node_rank);
        else if (strcmp(a, "--master-port") == 0)
            ok = parse_int(v, 1, 65535, &o->master_port);
        else if (strcmp(a, "--threads") == 0)
            ok = parse_int(v, 1, 4096, &o->threads);
        else if (strcmp(a, "--master-addr") == 0)
            o->master_addr = v;
        else if (strcmp(a, "--token") == 0)
            o->token = v;
        else if (strcmp(a, "--grace") == 0) {
            char *end;
            o->grace = strtod(v, &end);
            ok = *v && !*end && o->grace >= 0 && o->grace <= 3600;
        } else {
            fprintf(stderr, "awlrun: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "awlrun: %s: '%s' is out of range or not a number (see --help)\n", a, v);
            return 2;
        }
        i++;
    }
    if (i >= argc) {
        fprintf(stderr, "awlrun: no program to run (usage: awlrun -n N program [args...])\n");
        return 2;
    }
    if (o->nproc == 0) {
        fprintf(stderr, "awlrun: say how many ranks with -n N\n");
        return 2;
    }
    if (o->node_rank >= o->nnodes) {
        fprintf(stderr, "awlrun: --node-rank %d is not below --nnodes %d\n", o->node_rank,
                o->nnodes);
        return 2;
    }
    if (o->nnodes > 1 && o->master_port == 0) {
        fprintf(stderr, "awlrun: with --nnodes %d, give every host the same --master-port\n",
                o->nnodes);
        return 2;
    }
    o->argv = argv + i;
    return 0;
}

/* A port free on the master address right now (single host only). */
static int free_port(const char *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static void make_token(char *out, size_t size)
{
    unsigned char bytes[16] = {0};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, bytes, sizeof bytes) : -1;
    if (fd >= 0) close(fd);
    if (n != (ssize_t)sizeof bytes) { /* no urandom: time and pid, still unlikely to repeat */
        unsigned long long seed = (unsigned long long)(now() * 1e9) ^ ((unsigned long long)getpid() << 32);
        for (int i = 0; i < 16; i++) bytes[i] = (unsigned char)(seed >> (8 * (i % 8))) ^ (unsigned char)i;
    }
    for (int i = 0; i < 16 && 2 * (size_t)i + 2 < size; i++) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
}

static void remember(rank_proc *p, const char *line)
{
    snprintf(p->tail[p->tail_next], sizeof p->tail[0], "%s", line);
    p->tail_next = (p->tail_next + 1) % TAIL_LINES;
    if (p->tail_count < TAIL_LINES) p->tail_count++;
}

static void emit(const options *o, rank_proc *p, stream *s, const char *line, size_t len)
{
    if (o->prefix)
        fprintf(s->out, "[rank %d] %.*s\n", p->rank, (int)len, line);
    else
        fprintf(s->out, "%.*s\n", (int)len, line);
    fflush(s->out);
    if (s == &p->err) {
        char copy[256];
        snprintf(copy, sizeof copy, "%.*s", (int)len, line);
        remember(p, copy);
    }
}

/* Reads what a rank's pipe has and prints its complete lines. */
static void drain(const options *o, rank_proc *p, stream *s)
{
    char buf[8192];
    ssize_t n = read(s->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) { /* closed: the last partial line, then done */
        if (s->len) emit(o, p, s, s->line, s->len);
        s->len = 0;
        close(s->fd);
        s->fd = -1;
        return;
    }
    for (ssize_t i = 0; i < n; i++) {
        char c = buf[i];
        if (c == '\n' || s->len == sizeof s->line) {
            emit(o, p, s, s->line, s->len);
            s->len = 0;
            if (c == '\n') continue;
        }
        s->line[s->len++] = c;
    }
}

static void describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "status %d", status);
}

/* The cores this process may use, in order. */
static int allowed_cores(int *cores, int max)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cores[n++] = c;
    return n;
}

static pid_t start_rank(const options *o, rank_proc *p, int local, const char *port,
                        const char *token, int threads, const int *cores, int n_cores, int report_fd)
{
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* awlrun died before the line above */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        char buf[32];
        int world = o->nproc * o->nnodes;
        snprintf(buf, sizeof buf, "%d", o->node_rank * o->nproc + local);
        setenv("RANK", buf, 1);
        snprintf(buf, sizeof buf, "%d", world);
        setenv("WORLD_SIZE", buf, 1);
        snprintf(buf, sizeof buf, "%d", local);
        setenv("LOCAL_RANK", buf, 1);
        snprintf(buf, sizeof buf, "%d", o->nproc);
        setenv("LOCAL_WORLD_SIZE", buf, 1);
        snprintf(buf, sizeof buf, "%d", o->node_rank);
        setenv("GROUP_RANK", buf, 1);
        setenv("MASTER_ADDR", o->master_addr, 1);
        setenv("MASTER_PORT", port, 1);
        setenv("AWL_JOB_TOKEN", token, 1);
        fcntl(report_fd, F_SETFD, 0); /* the one pipe end a rank keeps across exec */
        snprintf(buf, sizeof buf, "%d", report_fd);
        setenv("AWLRUN_REPORT_FD", buf, 1);
        if (threads > 0) {
            snprintf(buf, sizeof buf, "%d", threads);
            setenv("OMP_NUM_THREADS", buf, 0);
        }
        if (o->bind && threads > 0 && n_cores >= o->nproc * threads) {
            cpu_set_t set;
            CPU_ZERO(&set);
            for (int c = 0; c < threads; c++) CPU_SET(cores[local * threads + c], &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        execvp(o->argv[0], o->argv);
        fprintf(stderr, "awlrun: cannot run %s: %s\n", o->argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: a signal may come before the child's own call */
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    p->out = (stream){out[0], stdout, {0}, 0};
    p->err = (stream){err[0], stderr, {0}, 0};
    p->blamed = -2;
    return pid;
}

/* Reads the ranks' "RANK BLAMED" lines (all of them: every writer is gone);
 * a rank's first line counts (a job's group and its sub-groups each report). */
static void read_reports(int fd, rank_proc *ranks, int n)
{
    char buf[4096];
    size_t have = 0;
    ssize_t k;
    while (have < sizeof buf - 1 && (k = read(fd, buf + have, sizeof buf - 1 - have)) > 0)
        have += (size_t)k;
    buf[have] = 0;
    int rank, blamed, used;
    for (const char *at = buf; sscanf(at, "%d %d\n%n", &rank, &blamed, &used) == 2; at += used)
        for (int i = 0; i < n; i++)
            if (ranks[i].rank == rank && ranks[i].blamed == -2) ranks[i].blamed = blamed;
}

/* Whether awlrun's own SIGTERM or SIGKILL ended r (after the stop began). */
static bool stopped_by_us(const rank_proc *r, double stop_at)
{
    return WIFSIGNALED(r->status) && (WTERMSIG(r->status) == SIGTERM || WTERMSIG(r->status) == SIGKILL) &&
           r->ended >= stop_at;
}

/* The rank that failed first: from the first failed exit, follow the blame
 * while it leads to another rank of this host that failed by itself and was
 * not met before (two ranks can blame each other: a link between them died). */
static int culprit(const rank_proc *ranks, int n, int first, double stop_at)
{
    bool seen[MAX_RANKS] = {false};
    int c = first;
    for (;;) {
        seen[c] = true;
        int next = -1;
        for (int i = 0; i < n; i++)
            if (ranks[i].rank == ranks[c].blamed) next = i;
        if (next < 0 || seen[next]) break;
        /* it failed by itself: it reported a failure of its own (our SIGTERM
         * may have ended it after), or it ended badly before we stopped it */
        const rank_proc *r = &ranks[next];
        bool failed = !(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
        if (r->blamed == -2 && (!failed || stopped_by_us(r, stop_at))) break;
        c = next;
    }
    return c;
}

static void signal_all(rank_proc *ranks, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (ranks[i].running) kill(-ranks[i].pid, sig); /* its process group: it and its children */
}

int main(int argc, char **argv)
{
    options o;
    int parsed = parse(argc, argv, &o);
    if (parsed) return parsed == 1 ? 0 : 2;

    char port[16], token[64];
    int p = o.master_port ? o.master_port : free_port(o.master_addr);
    if (p <= 0) {
        fprintf(stderr, "awlrun: cannot find a free port on %s (give --master-port)\n",
                o.master_addr);
        return 2;
    }
    snprintf(port, sizeof port, "%d", p);
    const char *env_token = getenv("AWL_JOB_TOKEN");
    if (o.token)
        snprintf(token, sizeof token, "%s", o.token);
    else if (env_token && *env_token)
        snprintf(token, sizeof token, "%s", env_token);
    else if (o.nnodes > 1) {
        snprintf(token, sizeof token, "awl-%s-%s", o.master_addr, port);
        fprintf(stderr, "awlrun: no --token given: using one derived from the master address; "
                        "give --token to keep other jobs' connections out\n");
    } else
        make_token(token, sizeof token);

    int cores[CPU_SETSIZE];
    int n_cores = allowed_cores(cores, CPU_SETSIZE);
    int threads = o.threads;
    if (!threads && !getenv("OMP_NUM_THREADS"))
        threads = n_cores / o.nproc > 0 ? n_cores / o.nproc : 1;

    int report[2];
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(report, O_CLOEXEC | O_NONBLOCK) < 0)
        return 2;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rank_proc *ranks = calloc((size_t)o.nproc, sizeof *ranks);
    double start = now();
    for (int i = 0; i < o.nproc; i++) {
        ranks[i].rank = o.node_rank * o.nproc + i;
        ranks[i].pid = start_rank(&o, &ranks[i], i, port, token, threads, cores, n_cores, report[1]);
        if (ranks[i].pid < 0) {
            fprintf(stderr, "awlrun: cannot start rank %d: %s\n", ranks[i].rank, strerror(errno));
            signal_all(ranks, i, SIGKILL);
            return 1;
        }
        ranks[i].running = true;
    }

    int running = o.nproc, first_failed = -1, forwarded = 0;
    double stop_at = 0, kill_at = 0;
    struct pollfd *fds = calloc((size_t)(2 * o.nproc + 1), sizeof *fds);
    int *owner = calloc((size_t)(2 * o.nproc + 1), sizeof *owner);
    for (;;) {
        int n = 0;
        fds[n++] = (struct pollfd){signal_pipe[0], POLLIN, 0};
        for (int i = 0; i < o.nproc; i++) {
            if (ranks[i].out.fd >= 0) {
                owner[n] = 2 * i;
                fds[n++] = (struct pollfd){ranks[i].out.fd, POLLIN, 0};
            }
            if (ranks[i].err.fd >= 0) {
                owner[n] = 2 * i + 1;
                fds[n++] = (struct pollfd){ranks[i].err.fd, POLLIN, 0};
            }
        }
        if (running == 0 && n == 1) break; /* every rank gone, every pipe drained */
        int timeout = kill_at > 0 ? (int)((kill_at - now()) * 1e3) + 1 : 1000;
        poll(fds, (nfds_t)n, timeout < 0 ? 0 : timeout);
        for (int k = 1; k < n; k++) {
            if (!fds[k].revents) continue;
            rank_proc *r = &ranks[owner[k] / 2];
            drain(&o, r, owner[k] % 2 ? &r->err : &r->out);
        }
        unsigned char sig;
        while (read(signal_pipe[0], &sig, 1) == 1) {
            if (sig == SIGCHLD) continue;
            forwarded++;
            fprintf(stderr, "awlrun: %s: passing it on to the ranks%s\n", strsignal(sig),
                    forwarded > 1 ? " (again: they are killed)" : "");
            signal_all(ranks, o.nproc, forwarded > 1 ? SIGKILL : sig);
            if (!kill_at) kill_at = now() + o.grace + 10;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < o.nproc; i++) {
                if (ranks[i].pid != pid || !ranks[i].running) continue;
                ranks[i].running = false;
                ranks[i].status = status;
                ranks[i].ended = now();
                running--;
                bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                if (failed && first_failed < 0 && !forwarded) {
                    first_failed = i;
                    stop_at = now();
                    kill_at = stop_at + o.grace;
                    signal_all(ranks, o.nproc, SIGTERM);
                }
            }
        }
        if (kill_at > 0 && now() >= kill_at && running > 0) {
            signal_all(ranks, o.nproc, SIGKILL);
            kill_at = now() + 3600; /* once */
        }
    }
    /* the pipes are drained: now the verdict */
    int exit_code = 0;
    read_reports(report[0], ranks, o.nproc);
    if (first_failed >= 0) {
        int ended_first = first_failed;
        first_failed = culprit(ranks, o.nproc, first_failed, stop_at);
        rank_proc *r = &ranks[first_failed];
        char how[128];
        describe_status(r->status, how, sizeof how);
        fprintf(stderr, "awlrun: rank %d (pid %d) failed first: %s, %.1f s after the start\n",
                r->rank, (int)r->pid, how, r->ended - start);
        if (ended_first != first_failed)
            fprintf(stderr, "awlrun: (rank %d ended before it, failing because of it)\n",
                    ranks[ended_first].rank);
        if (r->tail_count) {
            fprintf(stderr, "awlrun: its last lines of stderr:\n");
            for (int k = 0; k < r->tail_count; k++)
                fprintf(stderr, "    %s\n",
                        r->tail[(r->tail_next - r->tail_count + k + TAIL_LINES) % TAIL_LINES]);
        }
        int others = 0;
        for (int i = 0; i < o.nproc; i++) others += i != first_failed;
        if (others)
            fprintf(stderr, "awlrun: stopped the other %d rank%s (SIGTERM, then SIGKILL after %g s)\n",
                    others, others > 1 ? "s" : "", o.grace);
        exit_code = WIFEXITED(r->status) ? WEXITSTATUS(r->status) : 128 + WTERMSIG(r->status);
    } else {
        for (int i = 0; i < o.nproc && !exit_code; i++)
            if (!(WIFEXITED(ranks[i].status) && WEXITSTATUS(ranks[i].status) == 0))
                exit_code = WIFEXITED(ranks[i].status) ? WEXITSTATUS(ranks[i].status)
                                                       : 128 + WTERMSIG(ranks[i].status);
    }
    close(report[0]);
    close(report[1]);
    free(fds);
    free(owner);
    free(ranks);
    return exit_code;
}
