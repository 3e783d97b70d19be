/* Guided decoding's mask work on native threads (execrl.rollout.maskpool builds and loads this file).

   A job advances one slot's llguidance matcher by the token the slot sampled and writes the slot's next mask. Any
   idle thread takes the next job, so a slow mask delays no other; no thread needs Python's GIL, which per-job Python
   threads hand to each other at a cost that exceeded the masks' own (bench/README.md). Each job ends by storing its
   state (release order, after the mask): 1 the mask is written, 2 the constraint is complete (the row written is the
   end-only one the caller gave: no more jobs for the slot until it is reset), -1 the matcher refused the token or
   failed. The llguidance functions come as pointers from the Python side, which
   finds them in llguidance's own library.

   Slots whose matchers have consumed the same tokens of the same constraint are in the same state, and share one
   mask: each slot carries a key, a hash of its constraint and its tokens so far, and the jobs of a step with one key
   form a group. Its leader computes the mask; the others only advance their own matchers by the token; the group's
   last job to finish copies the leader's mask to the others' rows and stores every member's state. All the slots of
   a batch start in one state and walk the constraint's fixed text together (a "<think>" to open, a "```python" fence),
   and there a mask can cost milliseconds (no slice covers it): computed once, not once per slot. Two different token
   histories share a key with a chance of about 2^-64 per pair of slots.

   The host's wait for a step's masks (maskpool_wait) is here as well: it ends at a deadline the host passes, and
   what little the host does between the deadline and the sampling's launch is what the masks' copy must cover. */

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t (*consume_fn)(void *matcher, uint32_t token);
typedef int32_t (*mask_fn)(void *matcher, uint32_t *dest, size_t bytes);
typedef _Bool (*stopped_fn)(const void *matcher);

typedef struct {
    uint32_t *dest;
    int32_t *state;
    int32_t result; /* the member's own outcome: 1 consumed (and, the leader, masked), 2 complete, -1 failed */
} member_t;

typedef struct {
    int remaining; /* members whose jobs are still running */
    size_t n;
    member_t member[]; /* member 0: the leader */
} group_t;

typedef struct {
    void *matcher;
    int64_t token; /* consumed before the mask; < 0: none (the first mask of a request) */
    uint32_t *dest;
    const uint32_t *end; /* the row written once the constraint is complete: only the end of the sequence */
    int32_t *state;
    group_t *group; /* NULL: a job of its own */
    size_t member;
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
    size_t jobs, masks; /* jobs done, masks computed (a group's followers compute none) */
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

/* The group's outcome, once every member's job is done: a member that refused the token failed; the others take the
   leader's outcome, and its mask when it wrote one. */
static void finish_group(pool_t *p, group_t *g) {
    int32_t lead = g->member[0].result;
    for (size_t i = 1; i < g->n; i++) {
        member_t *m = &g->member[i];
        int32_t state = m->result < 0 ? -1 : lead;
        if (state > 0)
            memcpy(m->dest, g->member[0].dest, p->mask_bytes);
        __atomic_store_n(m->state, state, __ATOMIC_RELEASE);
    }
    __atomic_store_n(g->member[0].state, lead, __ATOMIC_RELEASE);
    free(g);
}

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
        else if (job.member > 0) /* a follower: its mask is the leader's */
            ;
        else if (p->stopped(job.matcher)) {
            state = 2;
            memcpy(job.dest, job.end, p->mask_bytes);
        } else if (p->mask(job.matcher, job.dest, p->mask_bytes) != 0)
            state = -1;
        else
            __atomic_add_fetch(&p->masks, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&p->jobs, 1, __ATOMIC_RELAXED);
        if (!job.group) {
            __atomic_store_n(job.state, state, __ATOMIC_RELEASE);
            continue;
        }
        job.group->member[job.member].result = state;
        if (__atomic_sub_fetch(&job.group->remaining, 1, __ATOMIC_ACQ_REL) == 0)
            finish_group(p, job.group);
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

static uint64_t mix64(uint64_t h) { /* splitmix64's finalizer */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

/* A decode step's jobs, one per slot s < n that is live, has a matcher (handle[s] != 0), is not complete and has
   no job in flight (state[s] is neither 2 nor 0) and sampled a token last step (not held[s], or token < 0: its first
   mask); its mask goes to rows + s * mask_bytes (ends[s]: the row to write there once complete). A job's token goes
   into its slot's key (keys[s]: set by the caller to its constraint's own value when the request starts), and jobs
   of equal keys form a group (see the top). Leaders are queued first, then the followers. Returns the number of
   jobs, or -1 when they do not fit. */
int maskpool_step(pool_t *p, size_t n, const int64_t *handle, const int64_t *tokens, const int64_t *live,
                  const int64_t *ends, int32_t *state, const uint8_t *held, char *rows, int64_t *keys) {
    size_t *slot = malloc(n * sizeof(size_t)), *lead = malloc(n * sizeof(size_t)), *size = calloc(n, sizeof(size_t));
    size_t buckets = 16;
    while (buckets < 2 * n)
        buckets *= 2;
    int64_t *table = malloc(buckets * sizeof(int64_t)); /* key -> its first job, open addressing; -1: empty */
    memset(table, 0xff, buckets * sizeof(int64_t));
    size_t count = 0;
    for (size_t s = 0; s < n; s++) {
        int32_t now = __atomic_load_n(&state[s], __ATOMIC_ACQUIRE);
        if (!live[s] || !handle[s] || now == 0 || now == 2 || (held[s] && tokens[s] >= 0))
            continue;
        if (tokens[s] >= 0)
            keys[s] = (int64_t)mix64((uint64_t)keys[s] * 0x9e3779b97f4a7c15ULL + (uint64_t)tokens[s] + 1);
        size_t b = mix64((uint64_t)keys[s]) & (buckets - 1);
        while (table[b] >= 0 && keys[slot[table[b]]] != keys[s])
            b = (b + 1) & (buckets - 1);
        if (table[b] < 0)
            table[b] = (int64_t)count;
        lead[count] = (size_t)table[b];
        size[lead[count]]++;
        slot[count++] = s;
    }
    group_t **group = calloc(count ? count : 1, sizeof(group_t *));
    size_t *member = calloc(count ? count : 1, sizeof(size_t));
    for (size_t j = 0; j < count; j++) {
        size_t l = lead[j];
        if (size[l] < 2)
            continue;
        if (!group[l]) {
            group[l] = malloc(sizeof(group_t) + size[l] * sizeof(member_t));
            group[l]->remaining = (int)size[l];
            group[l]->n = 0;
        }
        group_t *g = group[l];
        member[j] = g->n++;
        g->member[member[j]] = (member_t){(uint32_t *)(rows + slot[j] * p->mask_bytes), &state[slot[j]], 0};
    }
    pthread_mutex_lock(&p->mu);
    int fits = p->tail - p->head + count <= p->cap;
    size_t queued = 0;
    for (int pass = 0; fits && pass < 2; pass++) /* leaders (and lone jobs) first, then followers */
        for (size_t j = 0; j < count; j++) {
            if ((member[j] > 0) != pass)
                continue;
            size_t s = slot[j];
            state[s] = 0;
            job_t job = {(void *)handle[s], tokens[s], (uint32_t *)(rows + s * p->mask_bytes),
                         (const uint32_t *)ends[s], &state[s], group[lead[j]], member[j]};
            p->ring[(p->tail + queued++) % p->cap] = job;
        }
    __atomic_store_n(&p->tail, p->tail + queued, __ATOMIC_RELEASE);
    if (queued)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (!fits)
        for (size_t j = 0; j < count; j++)
            if (group[j])
                free(group[j]);
    free(slot), free(lead), free(size), free(table), free(group), free(member);
    return fits ? (int)count : -1;
}

/* Wait for a step's jobs (state[s] == 0: pending) until none is pending, or until the clock passes `deadline`
   (CLOCK_MONOTONIC seconds, Python's time.perf_counter; < 0: none) with at most share * (live slots) pending. Then
   late[s] = 1 for each slot still pending (0 for the others), and *failed = the number of failed jobs (state -1).
   Returns the number late. */
int maskpool_wait(size_t n, const int32_t *state, const int64_t *live, double deadline, double share, uint8_t *late,
                  int *failed) {
    size_t lives = 0;
    for (size_t s = 0; s < n; s++)
        lives += live[s] != 0;
    for (long spin = 0;; spin++) {
        size_t pending = 0;
        for (size_t s = 0; s < n; s++)
            pending += __atomic_load_n(&state[s], __ATOMIC_ACQUIRE) == 0;
        if (!pending)
            break;
        if (deadline >= 0 && pending <= share * lives) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if (t.tv_sec + 1e-9 * t.tv_nsec >= deadline)
                break;
        }
        if (spin % 64 == 63)
            sched_yield();
        else
            RELAX();
    }
    int count = 0, bad = 0;
    for (size_t s = 0; s < n; s++) {
        int32_t now = __atomic_load_n(&state[s], __ATOMIC_ACQUIRE);
        late[s] = now == 0;
        count += now == 0;
        bad += now == -1;
    }
    *failed = bad;
    return count;
}

int maskpool_threads(pool_t *p) { return p->nthreads; }

/* The pool's counts so far: out[0] jobs done, out[1] masks computed. */
void maskpool_counts(pool_t *p, int64_t *out) {
    out[0] = (int64_t)__atomic_load_n(&p->jobs, __ATOMIC_RELAXED);
    out[1] = (int64_t)__atomic_load_n(&p->masks, __ATOMIC_RELAXED);
}
