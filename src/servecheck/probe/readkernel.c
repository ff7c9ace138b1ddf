/* servecheck read-stream kernel: pure reads over a buffer first touched by the threads that read it.
 *
 * sc_alloc maps anonymous memory and asks for 2 MiB pages (huge = 1) or forbids them (huge = 0).
 * sc_read fills the buffer with normal non-zero doubles from nthreads threads (each its own chunk, so
 * pages land on the reading thread's node and never map to the shared zero page), then runs `passes`
 * timed read passes, every thread summing its chunk as 64-bit integers (vectorises without -ffast-math;
 * the bits are those of the doubles). times_out[p] gets the wall time of pass p in seconds: from the
 * first thread that started reading to the last that finished. Every thread stamps its own start and
 * end, because one timekeeper descheduled between the barrier and its clock read (a loaded machine,
 * more threads than free cores) would start the clock after the others had begun and report a pass
 * shorter than it was, which best-of-N then picks.
 *
 * No worker touches the barrier before every worker exists: the barrier counts nthreads arrivals, so
 * a thread that fails to start (thread or memory limit) would leave the others waiting on it forever.
 * Workers first wait on a gate that opens (all started) or aborts (one failed).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

typedef struct {
    uint64_t *buf;
    size_t n;
    int nthreads;
    int passes;
    double *times;
    double *starts; /* [pass * nthreads + id] */
    double *ends;
    pthread_barrier_t bar;
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate; /* 0 wait, 1 run, -1 abort */
    uint64_t sink[256];
} ctx_t;

typedef struct {
    ctx_t *c;
    int id;
} arg_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One plain reduction, which gcc and clang vectorise into wide loads. Measured against the STREAM-like
 * reference (benchmarks/bandwidth_vs_stream.py): eight hand-unrolled scalar accumulators, which the
 * compiler re-vectorised into the same one-register loop, still read 7-10% slower on a Xeon with
 * AVX-512, round after round, while this form and the reference's own loop read alike. */
static uint64_t sum_range(const uint64_t *restrict p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

static int wait_gate(ctx_t *c) {
    pthread_mutex_lock(&c->gate_mu);
    while (c->gate == 0) pthread_cond_wait(&c->gate_cv, &c->gate_mu);
    int go = c->gate > 0;
    pthread_mutex_unlock(&c->gate_mu);
    return go;
}

static void open_gate(ctx_t *c, int value) {
    pthread_mutex_lock(&c->gate_mu);
    c->gate = value;
    pthread_cond_broadcast(&c->gate_cv);
    pthread_mutex_unlock(&c->gate_mu);
}

static void *worker(void *vp) {
    arg_t *a = (arg_t *)vp;
    ctx_t *c = a->c;
    if (!wait_gate(c)) return NULL;
    size_t chunk = c->n / (size_t)c->nthreads;
    size_t lo = (size_t)a->id * chunk;
    size_t hi = (a->id == c->nthreads - 1) ? c->n : lo + chunk;
    double *d = (double *)c->buf;
    for (size_t i = lo; i < hi; i++) d[i] = 1.0 + (double)(i & 7) * 0.125;
    uint64_t s = 0;
    for (int p = 0; p < c->passes; p++) {
        size_t slot = (size_t)p * (size_t)c->nthreads + (size_t)a->id;
        pthread_barrier_wait(&c->bar);
        c->starts[slot] = now_s();
        s += sum_range(c->buf + lo, hi - lo);
        c->ends[slot] = now_s();
        pthread_barrier_wait(&c->bar);
    }
    c->sink[a->id & 255] = s;
    return NULL;
}

void *sc_alloc(size_t nbytes, int huge) {
    void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, nbytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    return p;
}

void sc_free(void *p, size_t nbytes) {
    if (p) munmap(p, nbytes);
}

/* Returns 0 on success, -1 when the threads could not all be started (none is left running). */
int sc_read(void *buf, size_t nbytes, int nthreads, int passes, double *times_out) {
    if (nthreads < 1 || passes < 1) return -1;
    ctx_t *c = (ctx_t *)calloc(1, sizeof(ctx_t));
    pthread_t *th = (pthread_t *)calloc((size_t)nthreads, sizeof(pthread_t));
    arg_t *args = (arg_t *)calloc((size_t)nthreads, sizeof(arg_t));
    double *starts = (double *)calloc((size_t)nthreads * (size_t)passes, sizeof(double));
    double *ends = (double *)calloc((size_t)nthreads * (size_t)passes, sizeof(double));
    if (!c || !th || !args || !starts || !ends) { free(c); free(th); free(args); free(starts); free(ends); return -1; }
    c->starts = starts;
    c->ends = ends;
    c->buf = (uint64_t *)buf;
    c->n = nbytes / sizeof(uint64_t);
    c->nthreads = nthreads;
    c->passes = passes;
    c->times = times_out;
    pthread_mutex_init(&c->gate_mu, NULL);
    pthread_cond_init(&c->gate_cv, NULL);
    int barrier_ok = pthread_barrier_init(&c->bar, NULL, (unsigned)nthreads) == 0;
    int rc = barrier_ok ? 0 : -1;
    int started = 0;
    for (int i = 0; rc == 0 && i < nthreads; i++) {
        args[i].c = c;
        args[i].id = i;
        if (pthread_create(&th[i], NULL, worker, &args[i]) != 0) rc = -1; else started++;
    }
    open_gate(c, rc == 0 ? 1 : -1);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int p = 0; rc == 0 && p < passes; p++) {
        double first = starts[(size_t)p * (size_t)nthreads], last = ends[(size_t)p * (size_t)nthreads];
        for (int i = 1; i < nthreads; i++) {
            size_t slot = (size_t)p * (size_t)nthreads + (size_t)i;
            if (starts[slot] < first) first = starts[slot];
            if (ends[slot] > last) last = ends[slot];
        }
        times_out[p] = last - first;
    }
    if (barrier_ok) pthread_barrier_destroy(&c->bar);
    pthread_cond_destroy(&c->gate_cv);
    pthread_mutex_destroy(&c->gate_mu);
    free(th); free(args); free(starts); free(ends); free(c);
    return rc;
}
