/* Guided decoding's mask work on native threads (execrl.rollout.maskpool builds and loads this file).

   A job advances one slot's llguidance matcher by the token the slot sampled and writes the slot's next mask. Any
   idle thread takes the next job, so a slow mask delays no other; no thread needs Python's GIL, which per-job Python
   threads hand to each other at a cost that exceeded the masks' own (bench/README.md). Each job ends by storing its
   state (release order, after the mask): 1 the mask is written, 2 the constraint is complete (no mask written),
   -1 the matcher refused the token or failed. The llguidance functions come as pointers from the Python side, which
   finds them in llguidance's own library. */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef int32_t (*consume_fn)(void *matcher, uint32_t token);
typedef int32_t (*mask_fn)(void *matcher, uint32_t *dest, size_t bytes);
typedef _Bool (*stopped_fn)(const void *matcher);

typedef struct {
    void *matcher;
    int64_t token; /* consumed before the mask; < 0: none (the first mask of a request) */
    uint32_t *dest;
    int32_t *state;
} job_t;

typedef struct {
    consume_fn consume;
    mask_fn mask;
    stopped_fn stopped;
    size_t mask_bytes, cap, head, tail;
    job_t *ring;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nthreads, spins;
    pthread_t *threads;
} pool_t;

/* Threads spin a while (spins pauses) for the next job before sleeping: a decode step hands out jobs every few
   milliseconds, and waking a sleeping thread can cost more than a mask (on the GPU machine's sandboxed host). */
#if defined(__x86_64__) || defined(__i386__)
#define RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define RELAX() __asm__ volatile("yield")
#else
#define RELAX() ((void)0)
#endif

static void *run(void *arg) {
    pool_t *p = arg;
    for (;;) {
        for (int i = 0; i < p->spins && __atomic_load_n(&p->head, __ATOMIC_RELAXED) ==
                                         __atomic_load_n(&p->tail, __ATOMIC_RELAXED); i++)
            RELAX();
        pthread_mutex_lock(&p->mu);
        while (p->head == p->tail)
            pthread_cond_wait(&p->cv, &p->mu);
        job_t job = p->ring[p->head % p->cap];
        __atomic_store_n(&p->head, p->head + 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&p->mu);
        int32_t state = 1;
        if (job.token >= 0 && p->consume(job.matcher, (uint32_t)job.token) != 0)
            state = -1;
        else if (p->stopped(job.matcher))
            state = 2;
        else if (p->mask(job.matcher, job.dest, p->mask_bytes) != 0)
            state = -1;
        __atomic_store_n(job.state, state, __ATOMIC_RELEASE);
    }
}

pool_t *maskpool_new(int nthreads, int spins, size_t cap, consume_fn consume, mask_fn mask, stopped_fn stopped,
                     size_t mask_bytes) {
    pool_t *p = calloc(1, sizeof(pool_t));
    p->spins = spins;
    p->consume = consume;
    p->mask = mask;
    p->stopped = stopped;
    p->mask_bytes = mask_bytes;
    p->cap = cap;
    p->ring = calloc(cap, sizeof(job_t));
    p->threads = calloc(nthreads, sizeof(pthread_t));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (p->nthreads = 0; p->nthreads < nthreads; p->nthreads++)
        if (pthread_create(&p->threads[p->nthreads], NULL, run, p) != 0)
            break;
    return p;
}

/* A decode step's jobs, one per slot s < n that is live, has a matcher (handle[s] != 0), is not complete
   (ended[s] == 0), has no job in flight (state[s] != 0) and sampled a token last step (not held[s], or token < 0:
   its first mask); its mask goes to rows + s * mask_bytes. Returns the number of jobs, or -1 when they do not fit. */
int maskpool_step(pool_t *p, size_t n, const int64_t *handle, const int64_t *tokens, const int64_t *live,
                  const uint8_t *ended, int32_t *state, const uint8_t *held, char *rows) {
    pthread_mutex_lock(&p->mu);
    size_t count = 0;
    for (size_t s = 0; s < n; s++) {
        if (!live[s] || !handle[s] || ended[s] || __atomic_load_n(&state[s], __ATOMIC_ACQUIRE) == 0 ||
            (held[s] && tokens[s] >= 0))
            continue;
        if (p->tail - p->head + count + 1 > p->cap) {
            pthread_mutex_unlock(&p->mu);
            return -1;
        }
        state[s] = 0;
        job_t job = {(void *)handle[s], tokens[s], (uint32_t *)(rows + s * p->mask_bytes), &state[s]};
        p->ring[(p->tail + count++) % p->cap] = job;
    }
    __atomic_store_n(&p->tail, p->tail + count, __ATOMIC_RELEASE);
    if (count)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return (int)count;
}

int maskpool_threads(pool_t *p) { return p->nthreads; }
