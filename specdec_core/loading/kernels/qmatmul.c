/* Products of float32 rows with weights held in their GGUF quantisation, for the CPU.
 *
 * One layout serves every supported GGUF type: a weight row is cut into groups of G values (G = 16 or 32), each
 * stored as small integers q with a float scale d and offset m, so that w = d * q + m exactly as the file defines
 * it. "u4" keeps q in 0..15 as nibbles (16 bytes per group of 32: low nibbles are values 0..15, high nibbles 16..31);
 * "s8" keeps q as signed bytes.
 *
 * Activations are quantised per block of 32 to a 16-bit integer each, a coarse byte and the rounding left over in
 * 1/256 steps (x = d * (hi + lo / 256), kept as 256 * hi + lo), so a group's dot product is an exact integer sum
 * scaled once, with about 15 bits of each activation. The weights of a block are widened to 16 bits once and
 * multiplied with each row's values in 16-bit pairs (maddwd), which leaves per row only two multiplies a block. Or, when the caller asks (`fine` = 0), to one byte, as llama.cpp's quantised products
 * do: half the integer work, and the replies llama.cpp gives on the same file (a small model's can differ from its
 * float replies; see docs/performance.md).
 *
 * Batch invariance is the point of this file: each output value of each row is computed by the same sequence of
 * operations whatever the number of rows in the call and however the outputs are split between threads. A check of
 * k drafted tokens therefore computes, bit for bit, what k one-token steps would: greedy speculation reproduces the
 * quantised verifier's own greedy output.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SPECDEC_AVX2 1
#else
#define SPECDEC_AVX2 0
#endif
/* AVX-512 with VNNI (Intel since Ice Lake, AMD since Zen 4): the 16-bit products below in 512-bit vectors, one
 * multiply-and-add instruction (vpdpwssd) per 32 values, and each group scaled in float as it is summed. */
#if SPECDEC_AVX2 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define SPECDEC_AVX512 1
#else
#define SPECDEC_AVX512 0
#endif

#define QBLOCK 32
#define MAX_THREADS 64
#define ROW_CHUNK 4

typedef struct {
    int kind; /* 0: u4, 1: s8 */
    const uint8_t *w;
    const float *wd, *wm;
    int n, k, g;
    const int8_t *xq;  /* [rows, 2 * k] bytes: one byte per value (!fine: then k unused), or 16-bit values (fine) in
                        * each block's kernel order (fine_slot) */
    const float *xd;   /* [rows, k / 32]: block scales (of the combined value 256 * hi + lo) */
    const float *xs;   /* [rows, k / 16]: xd * (sum of q over each half block) */
    const float *xw;   /* [rows, k / 32]: xd * (sum of q over each block), in block order */
    const float *xg;   /* [rows, k / g]: each table group's activation scale (xd of its block; xd itself for g = 32) */
    int rows;
    float *y;          /* [rows, n] */
    int parts;
    int fine;          /* 1: two bytes per activation (coarse and fine); 0: one byte, as llama.cpp's products use */
    int tables;        /* 0: wd, wm a float per group; 1: a K-quant's own tables (k_tables); 2: wd, wm a half-precision
                        * float per group (the file's own for Q4_0 to Q8_0); 1 and 2 in AVX-512 builds only */
} task_t;

/* ---- A K-quant's own scale tables (AVX-512 builds) ----
 * Q4_K, Q5_K and Q6_K give each group of 32 (16 for Q6_K) a small integer scale (and, but for Q6_K, an offset) under
 * a float scale per 256 values. Kept so, a row's tables take 3 bytes a group of 32 (sc, mn, and d, dmin per 256)
 * instead of 8, and 1.25 a group of 16 instead of 4: a fifth fewer bytes to read for a Q4_K_M model's step. The
 * products make each group's scale and offset from them as the decoder would (d * sc, -(dmin * mn): the same floats).
 * A row's table, in bytes: groups of 32: sc [groups], mn [groups], d [groups / 8] and dmin [groups / 8] as floats;
 * groups of 16: sc [groups] as signed bytes in the table order (half_index), then d [groups / 16] as floats. */
static inline size_t k_table_bytes(int g, int groups) { return g == 32 ? (size_t)3 * groups : (size_t)groups + groups / 4; }

int specdec_has_avx2(void) { return SPECDEC_AVX2; }
int specdec_has_avx512(void) { return SPECDEC_AVX512; }

/* Where the value of half `h` of block `b` lies in a table of per-half values (the activations' half-block sums, and a
 * weight's scales and offsets in groups of 16): whole quads of blocks keep their four first halves, then their four
 * second halves, so that the AVX2 code loads them as one vector; the last 1-3 blocks keep their halves in order. */
static inline size_t half_index(int b, int h, int blocks) {
    int quads = blocks / 4;
    return b < quads * 4 ? (size_t)8 * (b / 4) + 4 * h + (b % 4) : (size_t)2 * b + h;
}

/* Where value j (0..31) of a block lies among its 16-bit activations: values 0-7, 16-23, 8-15, 24-31, the order in
 * which a block's weights come out when widened from bytes (unpacklo/unpackhi work within 128-bit lanes, and a
 * block's bytes hold values 0-15 in the low lane and 16-31 in the high one). */
static inline int fine_slot(int j) { return (j & 7) | (((j >> 4) & 1) << 3) | (((j >> 3) & 1) << 4); }

/* ---- The interleaved layout of AVX-512 builds (specdec_layout() == 1) ----
 * There a weight row's values are laid out so that each 32-bit lane of a 512-bit vector sums the products of one group
 * only: a group's 32 (or 16) values are multiplied in 16-bit pairs lane by lane, and a group's sum comes out of its
 * lanes as an exact integer, scaled once for sixteen groups at a time. The row's groups, in the order of its scale
 * table, fall into pieces: whole sixteens first, then the rest in pieces of 8, 4, 2 and 1 (the largest that fits, in
 * turn). A piece of p groups gives each group 16 / p lanes and takes g * p / 32 steps of 32 values: in step s, lane l
 * holds values 2j and 2j + 1 of the piece's group l / (16 / p), where j = s * (16 / p) + l % (16 / p). Nibble weights
 * keep two steps in 32 bytes (the low nibbles the first step, the high the second); a piece with one step (a lone
 * group of 32) keeps it in 16 bytes, low nibbles the step's first 16 values, high nibbles its last 16. Activations lie
 * in the same order, 16 bits a value. Builds without AVX-512 keep the natural layout. */

/* The piece that holds table group `ti` of a row of `groups` groups: its first group and its size. */
static inline void piece_of(int ti, int groups, int *start, int *size) {
    int whole = groups / 16 * 16;
    if (ti < whole) { *start = ti & ~15; *size = 16; return; }
    int at = whole;
    for (int p = 8; p >= 1; p >>= 1)
        if ((groups - whole) & p) {
            if (ti < at + p) { *start = at; *size = p; return; }
            at += p;
        }
    *start = ti; *size = 1;  /* not reached for ti < groups */
}

/* Where table group `ti`'s values lie in the interleaved layout: its piece's first value and its first lane (`base`,
 * in values from the row's start), and its lanes a step; pair_in then places each of its pairs. */
static inline void group_lanes(int ti, int groups, int g, int *base, int *lanes) {
    int start, p;
    piece_of(ti, groups, &start, &p);
    *lanes = 16 / p;
    *base = start * g + 2 * (ti - start) * *lanes;
}

/* The index (in values from the row's start) of value 2j of a group whose lanes group_lanes gave. */
static inline int pair_in(int base, int lanes, int j) { return base + j / lanes * 32 + 2 * (j % lanes); }

/* Where values 2j and 2j + 1 of table group `ti` lie in the interleaved layout: the index of value 2j. */
static inline int pair_position(int ti, int j, int groups, int g) {
    int base, lanes;
    group_lanes(ti, groups, g, &base, &lanes);
    return pair_in(base, lanes, j);
}

/* The natural column of value v of table group ti (groups of 16 lie in half_index's order). */
static inline int natural_column(int ti, int v, int groups, int g) {
    if (g == 32) return ti * 32 + v;
    int blocks = groups / 2, quads = blocks / 4, b, h;
    if (ti < quads * 8) { b = ti / 8 * 4 + ti % 4; h = ti % 8 / 4; }
    else { b = ti / 2; h = ti % 2; }
    return b * 32 + h * 16 + v;
}

/* For nibble weights (groups of 32): the byte and nibble (0 low, 1 high) of the value at `position` (pair_position's
 * index, plus 0 or 1) of the interleaved row. */
static inline int nibble_byte(int position, int groups, int *nibble) {
    int start, p;
    piece_of(position / 32, groups, &start, &p);  /* with groups of 32 a piece of p groups spans 32 p values */
    int within = position - start * 32, step = within / 32, e = within % 32;
    if (p > 1) { *nibble = step & 1; return start * 16 + step / 2 * 32 + e; }
    *nibble = e >> 4;
    return start * 16 + (e & 15);
}

/* One block of 32 values scaled by `inv`: coarse bytes (into `hi`), or 16-bit values (into `wide`, fine_slot order),
 * and the integer sums of each half. lrintf rounds to nearest even, as the AVX2 conversion below does. */
__attribute__((unused)) static void quantise_block_plain(const float *src, float inv, int fine, int8_t *hi,
                                                          int16_t *wide, int16_t *halves[2], int sums[2]) {
    for (int j = 0; j < QBLOCK; j++) {
        float scaled = src[j] * inv;
        int coarse = (int)lrintf(scaled);
        coarse = coarse > 127 ? 127 : (coarse < -127 ? -127 : coarse);
        if (!fine) { hi[j] = (int8_t)coarse; sums[j / 16] += coarse; continue; }
        int rest = (int)lrintf((scaled - (float)coarse) * 256.0f);
        rest = rest > 127 ? 127 : (rest < -127 ? -127 : rest);
        if (halves) halves[j / 16][j % 16] = (int16_t)(256 * coarse + rest);
        else wide[fine_slot(j)] = (int16_t)(256 * coarse + rest);
        sums[j / 16] += 256 * coarse + rest;
    }
}

__attribute__((unused)) static float block_amax_plain(const float *src) {
    float amax = 0.0f;
    for (int j = 0; j < QBLOCK; j++) amax = fmaxf(amax, fabsf(src[j]));
    return amax;
}

#if SPECDEC_AVX2
static inline int hsum8i(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(x);
}

static float block_amax(const float *src) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_and_ps(_mm256_loadu_ps(src), magnitude);
    for (int j = 8; j < QBLOCK; j += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(src + j), magnitude));
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* quantise_block_plain's values, eight at a time: the same products, roundings and clamps. */
static void quantise_block(const float *src, float inv, int fine, int8_t *hi, int16_t *wide, int16_t *halves[2],
                           int sums[2]) {
    const __m256 scale = _mm256_set1_ps(inv), steps = _mm256_set1_ps(256.0f);
    const __m256i top = _mm256_set1_epi32(127), bottom = _mm256_set1_epi32(-127);
    __m256i v[4];
    for (int i = 0; i < 4; i++) {
        __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(src + 8 * i), scale);
        __m256i coarse = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(scaled), top), bottom);
        v[i] = coarse;
        if (fine) {
            __m256 left = _mm256_mul_ps(_mm256_sub_ps(scaled, _mm256_cvtepi32_ps(coarse)), steps);
            __m256i rest = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(left), top), bottom);
            v[i] = _mm256_add_epi32(_mm256_slli_epi32(coarse, 8), rest);
        }
    }
    sums[0] += hsum8i(_mm256_add_epi32(v[0], v[1]));
    sums[1] += hsum8i(_mm256_add_epi32(v[2], v[3]));
    if (halves) {  /* each half in order (packs works within 128-bit lanes; the permute undoes that) */
        _mm256_storeu_si256((__m256i *)halves[0],
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), _MM_SHUFFLE(3, 1, 2, 0)));
        _mm256_storeu_si256((__m256i *)halves[1],
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(v[2], v[3]), _MM_SHUFFLE(3, 1, 2, 0)));
    } else if (fine) {  /* fine_slot order: values 0-7, 16-23, then 8-15, 24-31 */
        __m256i first = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[2]), _MM_SHUFFLE(3, 1, 2, 0));
        __m256i second = _mm256_permute4x64_epi64(_mm256_packs_epi32(v[1], v[3]), _MM_SHUFFLE(3, 1, 2, 0));
        _mm256_storeu_si256((__m256i *)wide, first);
        _mm256_storeu_si256((__m256i *)(wide + 16), second);
    } else {
        __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)hi, bytes);
    }
}
#else
#define quantise_block quantise_block_plain
#define block_amax block_amax_plain
#endif

/* x [rows, k] -> two signed bytes per value (one when !fine), per-block scales and scaled half-block and block sums (k
 * a multiple of 32). Without AVX-512, 16-bit values lie in fine_slot's order; with it, every activation is 16 bits (the
 * coarse byte alone when !fine) in the interleaved layout of a weight with groups of g, and xg receives each table
 * group's block scale (for g = 16). */
static void quantise_rows(const float *x, int rows, int k, int fine, int g, int8_t *xq, float *xd, float *xs,
                          float *xw, float *xg) {
    int blocks = k / QBLOCK, groups = k / g;
    for (int r = 0; r < rows; r++) {
        int16_t *row16 = (int16_t *)(xq + (size_t)r * 2 * k);
        for (int b = 0; b < blocks; b++) {
            const float *src = x + (size_t)r * k + (size_t)b * QBLOCK;
            float d = block_amax(src) / 127.0f;
            float inv = d > 0.0f ? 1.0f / d : 0.0f;
            int sums[2] = {0, 0};
            float unit = fine ? d / 256.0f : d;
#if SPECDEC_AVX512
            int16_t values[QBLOCK];
            int16_t *halves[2] = {values, values + 16};
            quantise_block(src, inv, fine, NULL, NULL, halves, sums);
            for (int h = 0; h < QBLOCK / g; h++) {
                int ti = g == 32 ? b : (int)half_index(b, h, blocks), base, lanes;
                group_lanes(ti, groups, g, &base, &lanes);  /* once a group: this runs for every row of every product */
                for (int j = 0; j < g / 2; j++) {
                    int32_t pair;
                    memcpy(&pair, values + h * 16 + 2 * j, sizeof pair);
                    memcpy(row16 + pair_in(base, lanes, j), &pair, sizeof pair);
                }
                if (g == 16) xg[(size_t)r * groups + ti] = unit;
            }
#else
            (void)g; (void)groups; (void)xg;
            quantise_block(src, inv, fine, xq + (size_t)r * 2 * k + (size_t)b * QBLOCK, row16 + (size_t)b * QBLOCK,
                           NULL, sums);
#endif
            xd[(size_t)r * blocks + b] = unit;
            xs[(size_t)r * blocks * 2 + half_index(b, 0, blocks)] = unit * (float)sums[0];
            xs[(size_t)r * blocks * 2 + half_index(b, 1, blocks)] = unit * (float)sums[1];
            xw[(size_t)r * blocks + b] = unit * (float)(sums[0] + sums[1]);
        }
    }
}

#if SPECDEC_AVX2
static inline float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* One block of 32 weights as bytes ready for maddubs: unsigned nibbles, or the absolute values of signed bytes
 * (their signs go onto the activations). */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m256i load_block(const task_t *t, int kind, int col, int b) {
    if (kind == 0) {
        __m128i packed = _mm_loadu_si128((const __m128i *)(t->w + (size_t)col * (t->k / 2) + (size_t)b * 16));
        return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0F));
    }
    return _mm256_loadu_si256((const __m256i *)(t->w + (size_t)col * t->k + (size_t)b * QBLOCK));
}

/* A block's weights as the products need them, prepared once for all the rows of a call: bytes for maddubs (unsigned
 * nibbles, or the absolute values of signed bytes, whose signs go onto the activations), or, for 16-bit activations,
 * the values widened to 16 bits in fine_slot's order. */
typedef struct { __m256i bytes, lo16, hi16; } wblock_t;

ALWAYS_INLINE wblock_t prepare_block(int kind, int fine, __m256i wq) {
    wblock_t p;
    p.bytes = wq;
    if (fine) {
        __m256i sign = kind == 0 ? _mm256_setzero_si256() : _mm256_cmpgt_epi8(_mm256_setzero_si256(), wq);
        p.lo16 = _mm256_unpacklo_epi8(wq, sign);
        p.hi16 = _mm256_unpackhi_epi8(wq, sign);
    } else {
        p.lo16 = p.hi16 = _mm256_setzero_si256();
    }
    return p;
}

/* Eight int32 partial sums of one block's products (lanes 0-3: values 0-15, lanes 4-7: values 16-31). */
ALWAYS_INLINE __m256i block_sums(const task_t *t, int kind, int fine, wblock_t wb, int r, int b) {
    if (fine) {
        const int16_t *at = (const int16_t *)(t->xq + (size_t)r * 2 * t->k) + (size_t)b * QBLOCK;
        __m256i first = _mm256_madd_epi16(wb.lo16, _mm256_loadu_si256((const __m256i *)at));
        __m256i second = _mm256_madd_epi16(wb.hi16, _mm256_loadu_si256((const __m256i *)(at + 16)));
        return _mm256_add_epi32(first, second);
    }
    const int8_t *at = t->xq + (size_t)r * 2 * t->k + (size_t)b * QBLOCK;
    __m256i hi = _mm256_loadu_si256((const __m256i *)at);
    __m256i wabs = wb.bytes;
    if (kind != 0) { wabs = _mm256_sign_epi8(wb.bytes, wb.bytes); hi = _mm256_sign_epi8(hi, wb.bytes); }
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, hi), _mm256_set1_epi16(1));
}

/* A quad of blocks folded into a row's accumulator: the sums of blocks 0-3 (block_sums) become one vector [block 0..3,
 * first halves | block 0..3, second halves] (or, for whole groups of 32, [block 0..3 | zeros]), scaled by the groups'
 * scales and the row's block scales at once, plus the groups' offsets times the row's half-block sums. */
ALWAYS_INLINE __m256 fold_quad(__m256 acc, const int halves, __m256i s0, __m256i s1, __m256i s2, __m256i s3,
                               __m256 scale_w, __m256 offset_w, __m128 dx, __m256 xsum) {
    __m256 sums = _mm256_cvtepi32_ps(_mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3)));
    if (!halves) {
        __m128 whole = _mm_add_ps(_mm256_castps256_ps128(sums), _mm256_extractf128_ps(sums, 1));
        sums = _mm256_set_m128(_mm_setzero_ps(), whole);
        xsum = _mm256_set_m128(_mm_setzero_ps(), _mm_add_ps(_mm256_castps256_ps128(xsum),
                                                            _mm256_extractf128_ps(xsum, 1)));
    }
    __m256 scale = _mm256_mul_ps(scale_w, _mm256_set_m128(dx, dx));
    acc = _mm256_fmadd_ps(sums, scale, acc);
    return _mm256_fmadd_ps(offset_w, xsum, acc);
}

/* n values from `at` as [values 0, 2, 4.. | values 1, 3, 5..] with zeros after: a table's pairs of halves split into
 * first halves and second halves, as fold_quad takes them. */
ALWAYS_INLINE __m256 load_pairs(const float *at, int n) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 pairs = _mm256_maskload_ps(at, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes));
    return _mm256_permutevar8x32_ps(pairs, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}

ALWAYS_INLINE __m128 load_first(const float *at, int n) {
    return _mm_maskload_ps(at, _mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3)));
}

/* The last 1-3 blocks of a row whose length is not a multiple of 128 values, folded as one quad padded with empty
 * blocks. Their scales, offsets and half-block sums lie in plain order in the tables (half_index). */
ALWAYS_INLINE void fold_tail(const task_t *t, const int kind, const int halves, const int fine, int col, int r0,
                             int nr, const float *wd, const float *wm, __m256 *acc) {
    const int blocks = t->k / QBLOCK, first = blocks / 4 * 4, rem = blocks - first;
    const __m256i none = _mm256_setzero_si256();
    wblock_t w0 = prepare_block(kind, fine, load_block(t, kind, col, first)), w1 = w0, w2 = w0;
    if (rem > 1) w1 = prepare_block(kind, fine, load_block(t, kind, col, first + 1));
    if (rem > 2) w2 = prepare_block(kind, fine, load_block(t, kind, col, first + 2));
    __m256 scale_w, offset_w;
    if (halves) {
        scale_w = load_pairs(wd + 2 * first, 2 * rem);
        offset_w = wm ? load_pairs(wm + 2 * first, 2 * rem) : _mm256_setzero_ps();
    } else {
        scale_w = _mm256_set_m128(_mm_setzero_ps(), load_first(wd + first, rem));
        offset_w = _mm256_set_m128(_mm_setzero_ps(), wm ? load_first(wm + first, rem) : _mm_setzero_ps());
    }
    for (int i = 0; i < nr; i++) {
        int r = r0 + i;
        __m256i s0 = block_sums(t, kind, fine, w0, r, first);
        __m256i s1 = rem > 1 ? block_sums(t, kind, fine, w1, r, first + 1) : none;
        __m256i s2 = rem > 2 ? block_sums(t, kind, fine, w2, r, first + 2) : none;
        acc[i] = fold_quad(acc[i], halves, s0, s1, s2, none, scale_w, offset_w,
                           load_first(t->xd + (size_t)r * blocks + first, rem),
                           load_pairs(t->xs + (size_t)r * blocks * 2 + 2 * first, 2 * rem));
    }
}

/* Products of one weight row with up to ROW_CHUNK activation rows, four blocks at a time (fold_quad). Scales and
 * offsets of four blocks lie together in the weight's tables (see `kernel_order` in qkernel.py). */
ALWAYS_INLINE void row_avx2_of(const task_t *t, const int kind, const int halves, const int fine, int col, int r0,
                               int nr) {
    const int blocks = t->k / QBLOCK, quads = blocks / 4, groups = t->k / t->g;
    const float *wd = t->wd + (size_t)col * groups, *wm = t->wm ? t->wm + (size_t)col * groups : NULL;
    __m256 acc[ROW_CHUNK];
    for (int i = 0; i < nr; i++) acc[i] = _mm256_setzero_ps();
    for (int quad = 0; quad < quads; quad++) {
        int b = quad * 4;
        wblock_t w0 = prepare_block(kind, fine, load_block(t, kind, col, b));
        wblock_t w1 = prepare_block(kind, fine, load_block(t, kind, col, b + 1));
        wblock_t w2 = prepare_block(kind, fine, load_block(t, kind, col, b + 2));
        wblock_t w3 = prepare_block(kind, fine, load_block(t, kind, col, b + 3));
        __m256 scale_w, offset_w;
        if (halves) {
            scale_w = _mm256_loadu_ps(wd + 2 * b);
            offset_w = wm ? _mm256_loadu_ps(wm + 2 * b) : _mm256_setzero_ps();
        }
        else {
            __m128 d4 = _mm_loadu_ps(wd + b), m4 = wm ? _mm_loadu_ps(wm + b) : _mm_setzero_ps();
            scale_w = _mm256_set_m128(_mm_setzero_ps(), d4); offset_w = _mm256_set_m128(_mm_setzero_ps(), m4);
        }
        for (int i = 0; i < nr; i++) {
            int r = r0 + i;
            acc[i] = fold_quad(acc[i], halves, block_sums(t, kind, fine, w0, r, b),
                               block_sums(t, kind, fine, w1, r, b + 1), block_sums(t, kind, fine, w2, r, b + 2),
                               block_sums(t, kind, fine, w3, r, b + 3), scale_w, offset_w,
                               _mm_loadu_ps(t->xd + (size_t)r * blocks + b),
                               _mm256_loadu_ps(t->xs + (size_t)r * blocks * 2 + 2 * b));
        }
    }
    if (blocks % 4) fold_tail(t, kind, halves, fine, col, r0, nr, wd, wm, acc);
    for (int i = 0; i < nr; i++) t->y[(size_t)(r0 + i) * t->n + col] = hsum8(acc[i]);
}

/* The layouts and precisions as functions of their own, so that no test of either is left in the inner loops. */
static void row_u4(const task_t *t, int col, int r0, int nr) { row_avx2_of(t, 0, 0, 1, col, r0, nr); }
static void row_s8(const task_t *t, int col, int r0, int nr) { row_avx2_of(t, 1, 0, 1, col, r0, nr); }
static void row_s8_16(const task_t *t, int col, int r0, int nr) { row_avx2_of(t, 1, 1, 1, col, r0, nr); }
static void row_u4_a8(const task_t *t, int col, int r0, int nr) { row_avx2_of(t, 0, 0, 0, col, r0, nr); }
static void row_s8_a8(const task_t *t, int col, int r0, int nr) { row_avx2_of(t, 1, 0, 0, col, r0, nr); }
static void row_s8_16_a8(const task_t *t, int col, int r0, int nr) { row_avx2_of(t, 1, 1, 0, col, r0, nr); }

#if SPECDEC_AVX512
/* The tables of weight row `row` for the piece at `first`: its scales' and offsets' line (floats or halves), or a
 * K-quant's scale bytes (and offsets'), and its superblocks' floats. */
ALWAYS_INLINE void prefetch_tables(const task_t *t, const int ktables, size_t row, int first) {
    const int g = t->g, groups = t->k / g;
    if (!ktables) {
        const size_t size = t->tables == 2 ? 2 : 4, at = (row * groups + (size_t)first) * size;
        _mm_prefetch((const char *)t->wd + at, _MM_HINT_T0);
        if (t->wm) _mm_prefetch((const char *)t->wm + at, _MM_HINT_T0);
        return;
    }
    const char *table = (const char *)t->wd + row * k_table_bytes(g, groups);
    _mm_prefetch(table + first, _MM_HINT_T0);
    _mm_prefetch(table + (g == 32 ? 2 * (size_t)groups + (size_t)first / 2 : (size_t)groups + (size_t)first / 4),
                 _MM_HINT_T0);
    if (g == 32) _mm_prefetch(table + groups + first, _MM_HINT_T0);
}

/* One piece (see the interleaved layout above) of `cols` weight rows (1, 2 or 4) with `nr` activation rows: `steps`
 * multiply-and-adds (vpdpwssd) of 32 values into each pair's integer sums, alternating between two sums so that
 * consecutive steps do not wait for each other; then the sums of each lane, an exact integer per group, converted and
 * added in with the groups' scales times the row's (wd, xg: the piece's table entries, spread over their lanes). */
ALWAYS_INLINE void piece_512(const task_t *t, const int kind, const int ktables, const int cols, int col0, int r0,
                             int nr, int first, const int p, const int steps, const float *xg,
                             __m512 acc[4][ROW_CHUNK]) {
    const int g = t->g, groups = t->k / g;
    const size_t row_bytes = kind == 0 ? (size_t)t->k / 2 : (size_t)t->k;
    const size_t wbase = kind == 0 ? (size_t)first * g / 2 : (size_t)first * g, xbase = (size_t)first * g;
    const int16_t *xq[ROW_CHUNK];
    __m512i s0[4][ROW_CHUNK], s1[4][ROW_CHUNK];
    for (int i = 0; i < nr; i++) {
        xq[i] = (const int16_t *)(t->xq + (size_t)(r0 + i) * 2 * t->k) + xbase;
        for (int c = 0; c < cols; c++) s0[c][i] = s1[c][i] = _mm512_setzero_si512();
    }
    /* Several weight rows read side by side are short streams that the hardware's prefetcher does not follow from
     * memory: the same piece of the tile after next is fetched ahead, a line of its weights at each pair of steps (a
     * line every other pair for nibbles) and its tables' lines with the first, rather than all at once, which would
     * overflow the misses a core can have in flight. Fetching past the weight's end is harmless. */
    const size_t ahead = (size_t)col0 + 2 * (size_t)cols;
    const __m512i low = _mm512_set1_epi16(0x0F);
    int s = 0;
#pragma GCC unroll 8
    for (; s + 1 < steps; s += 2)
#pragma GCC unroll 4
        for (int c = 0; c < cols; c++) {
            const char *next = (const char *)t->w + (ahead + c) * row_bytes + wbase;
            if (kind != 0) _mm_prefetch(next + (size_t)s * 32, _MM_HINT_T0);
            else if (s % 4 == 0) _mm_prefetch(next + (size_t)s * 16, _MM_HINT_T0);
            if (s == 0) prefetch_tables(t, ktables, ahead + c, first);
            const uint8_t *w = t->w + (size_t)(col0 + c) * row_bytes + wbase;
            __m512i a, b;
            if (kind == 0) {
                __m512i bytes = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(w + (size_t)s * 16)));
                a = _mm512_and_si512(bytes, low);
                b = _mm512_srli_epi16(bytes, 4);
            } else {
                a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + (size_t)s * 32)));
                b = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + (size_t)s * 32 + 32)));
            }
#pragma GCC unroll 4
            for (int i = 0; i < nr; i++) {
                s0[c][i] = _mm512_dpwssd_epi32(s0[c][i], a, _mm512_loadu_si512(xq[i] + (size_t)s * 32));
                s1[c][i] = _mm512_dpwssd_epi32(s1[c][i], b, _mm512_loadu_si512(xq[i] + (size_t)s * 32 + 32));
            }
        }
    if (s < steps)  /* a last step alone */
        for (int c = 0; c < cols; c++) {
            const uint8_t *w = t->w + (size_t)(col0 + c) * row_bytes + wbase;
            __m512i a;
            if (kind == 0) {
                __m128i packed = _mm_loadu_si128((const __m128i *)(w + (size_t)s * 16));
                a = _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0F)),
                                                          _mm_and_si128(packed, _mm_set1_epi8(0x0F))));
            } else {
                a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + (size_t)s * 32)));
            }
            for (int i = 0; i < nr; i++)
                s0[c][i] = _mm512_dpwssd_epi32(s0[c][i], a, _mm512_loadu_si512(xq[i] + (size_t)s * 32));
        }
    /* Lane l belongs to the piece's group l / (16 / p). */
    const __mmask16 some = (__mmask16)(p == 16 ? 0xFFFF : (1u << p) - 1);
    const __m512i spread = _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             p == 16 ? 0 : p == 8 ? 1 : p == 4 ? 2 : p == 2 ? 3 : 4);
    /* The offsets' part, the groups' offsets times the row's group sums (xw by blocks for groups of 32, xs by halves in
     * the tables' order for groups of 16), one lane a group; none for a weight without offsets (wm NULL). */
    const float *sums = g == 16 ? t->xs : t->xw;
    for (int c = 0; c < cols; c++) {
        __m512 wdv, wmv = _mm512_setzero_ps();
        if (!ktables && t->tables != 2) {
            wdv = _mm512_maskz_loadu_ps(some, t->wd + (size_t)(col0 + c) * groups + first);
            if (t->wm) wmv = _mm512_maskz_loadu_ps(some, t->wm + (size_t)(col0 + c) * groups + first);
        } else if (!ktables) {  /* half-precision floats, widened exactly (a branch, not a tile of its own) */
            const uint16_t *wd16 = (const uint16_t *)t->wd, *wm16 = (const uint16_t *)t->wm;
            wdv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(some, wd16 + (size_t)(col0 + c) * groups + first));
            if (t->wm) wmv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(some, wm16 + (size_t)(col0 + c) * groups + first));
        } else {
            /* A piece lies within one or two superblocks: 8 groups of 32 each, or 16 groups of 16. */
            const uint8_t *table = (const uint8_t *)t->wd + (size_t)(col0 + c) * k_table_bytes(g, groups);
            const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            __m128i sc = _mm_maskz_loadu_epi8(some, table + first);
            if (g == 32) {
                const float *super = (const float *)(table + 2 * (size_t)groups);
                __m512i which = _mm512_srli_epi32(lanes, 3);
                __m512 d = _mm512_permutexvar_ps(which, _mm512_maskz_loadu_ps(p == 16 ? 0x3 : 0x1, super + first / 8));
                __m512 dmin = _mm512_permutexvar_ps(which, _mm512_maskz_loadu_ps(p == 16 ? 0x3 : 0x1,
                                                                                 super + groups / 8 + first / 8));
                wdv = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
                __m128i mn = _mm_maskz_loadu_epi8(some, table + groups + first);
                wmv = _mm512_castsi512_ps(_mm512_xor_si512(  /* -(dmin * mn), the sign flipped as the decoder's */
                    _mm512_castps_si512(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)))),
                    _mm512_set1_epi32((int)0x80000000)));
                wmv = _mm512_maskz_mov_ps(some, wmv);
            } else {
                const float *super = (const float *)(table + (size_t)groups);
                wdv = _mm512_mul_ps(_mm512_set1_ps(super[first / 16]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
            }
            wdv = _mm512_maskz_mov_ps(some, wdv);
        }
        if (p != 16) wdv = _mm512_permutexvar_ps(spread, wdv);
        for (int i = 0; i < nr; i++) {
            __m512 xgv = _mm512_maskz_loadu_ps(some, xg + (size_t)(r0 + i) * groups + first);
            if (p != 16) xgv = _mm512_permutexvar_ps(spread, xgv);
            acc[c][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[c][i], s1[c][i])),
                                        _mm512_mul_ps(wdv, xgv), acc[c][i]);
            if (t->wm)  /* (K tables: g == 32 only) */
                acc[c][i] = _mm512_fmadd_ps(wmv, _mm512_maskz_loadu_ps(some, sums + (size_t)(r0 + i) * groups + first),
                                            acc[c][i]);
        }
    }
}

/* Products of `cols` weight rows with `nr` activation rows in the interleaved layout, piece by piece, the offsets' part
 * with each piece; each output's 16 lanes summed at the end. Several weight rows at once give
 * one activation row independent sums to overlap; each output goes through the same steps in the same order whatever
 * the tile, so the values do not depend on how many rows a call has. */
ALWAYS_INLINE void tile_avx512_of(const task_t *t, const int kind, const int halves, const int ktables, const int cols,
                                  int col0, int r0, int nr) {
    const int g = halves ? 16 : 32, groups = t->k / g;
    const float *xg = halves ? t->xg : t->xd;
    __m512 acc[4][ROW_CHUNK];
    for (int c = 0; c < cols; c++)
        for (int i = 0; i < nr; i++) acc[c][i] = _mm512_setzero_ps();
    const int whole = groups / 16 * 16;
    for (int first = 0; first < whole; first += 16)
        piece_512(t, kind, ktables, cols, col0, r0, nr, first, 16, g / 2, xg, acc);
    for (int p = 8, first = whole; p >= 1; p >>= 1)
        if ((groups - whole) & p) {
            piece_512(t, kind, ktables, cols, col0, r0, nr, first, p, g * p / 32, xg, acc);
            first += p;
        }
    for (int c = 0; c < cols; c++)
        for (int i = 0; i < nr; i++) t->y[(size_t)(r0 + i) * t->n + col0 + c] = _mm512_reduce_add_ps(acc[c][i]);
}

/* Each shape of tile as a function of its own, its loops of constant length, so that its sums stay in registers. */
#define TILES_512(name, kind, halves, kt)                                                                              \
    static void name##_4x1(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 4, col, r0, 1); }  \
    static void name##_2x2(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 2, col, r0, 2); }  \
    static void name##_1x1(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 1, col, r0, 1); }  \
    static void name##_1x2(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 1, col, r0, 2); }  \
    static void name##_1x3(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 1, col, r0, 3); }  \
    static void name##_1x4(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 1, col, r0, 4); }  \
    static void name##_2x3(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 2, col, r0, 3); }  \
    static void name##_2x4(const task_t *t, int col, int r0) { tile_avx512_of(t, kind, halves, kt, 2, col, r0, 4); }  \
    static const tile_fn name[8] = {name##_4x1, name##_2x2, name##_1x1, name##_1x2, name##_1x3, name##_1x4,           \
                                    name##_2x3, name##_2x4};
typedef void (*tile_fn)(const task_t *, int, int);
TILES_512(tiles_u4, 0, 0, 0)
TILES_512(tiles_s8, 1, 0, 0)
TILES_512(tiles_s8_16, 1, 1, 0)
TILES_512(tiles_u4_k, 0, 0, 1)
TILES_512(tiles_s8_k, 1, 0, 1)
TILES_512(tiles_s8_16_k, 1, 1, 1)

/* Columns start .. end - 1 of every row: four weight rows at a time where the rows come one at a time, else two (or,
 * at the slice's end, one) with up to ROW_CHUNK activation rows. Float and half tables share their tiles. */
static void run_part_512(const task_t *t, int start, int end) {
    const tile_fn *tiles = t->tables == 1 ? (t->kind == 0 ? tiles_u4_k : (t->g == 16 ? tiles_s8_16_k : tiles_s8_k))
                                          : (t->kind == 0 ? tiles_u4 : (t->g == 16 ? tiles_s8_16 : tiles_s8));
    for (int col = start; col < end; col += 4) {
        int cols = end - col < 4 ? end - col : 4;
        for (int r0 = 0; r0 < t->rows; r0 += ROW_CHUNK) {
            int nr = t->rows - r0 < ROW_CHUNK ? t->rows - r0 : ROW_CHUNK;
            if (nr == 1 && cols == 4) tiles[0](t, col, r0);
            else if (cols == 4) {  /* two weight rows a tile share the activations' loads */
                const tile_fn two = tiles[nr == 2 ? 1 : nr + 3];
                two(t, col, r0);
                two(t, col + 2, r0);
            } else for (int c = 0; c < cols; c++) tiles[1 + nr](t, col + c, r0);
        }
    }
}
#endif

static void row_avx2(const task_t *t, int col, int r0, int nr) {
    if (t->fine) {
        if (t->kind == 0) row_u4(t, col, r0, nr);
        else if (t->g == 16) row_s8_16(t, col, r0, nr);
        else row_s8(t, col, r0, nr);
    } else {
        if (t->kind == 0) row_u4_a8(t, col, r0, nr);
        else if (t->g == 16) row_s8_16_a8(t, col, r0, nr);
        else row_s8_a8(t, col, r0, nr);
    }
}
#endif

/* The same products in plain C: integer sums per group, then the same scaling. */
static void row_plain(const task_t *t, int col, int r0, int nr) {
    const int blocks = t->k / QBLOCK, gpb = QBLOCK / t->g, groups = t->k / t->g;
    const float *wd = t->wd + (size_t)col * groups, *wm = t->wm ? t->wm + (size_t)col * groups : NULL;
    for (int i = 0; i < nr; i++) {
        int r = r0 + i;
        float acc = 0.0f;
        for (int b = 0; b < blocks; b++) {
            const int8_t *xq = t->xq + (size_t)r * 2 * t->k + (size_t)b * QBLOCK;
            const int16_t *wide = (const int16_t *)(t->xq + (size_t)r * 2 * t->k) + (size_t)b * QBLOCK;
            int sums[2] = {0, 0};
            for (int j = 0; j < QBLOCK; j++) {
                int q;
                if (t->kind == 0) {
                    uint8_t byte = t->w[(size_t)col * (t->k / 2) + (size_t)b * 16 + (j & 15)];
                    q = j < 16 ? (byte & 0x0F) : (byte >> 4);
                } else {
                    q = ((const int8_t *)t->w)[(size_t)col * t->k + (size_t)b * QBLOCK + j];
                }
                sums[j / 16] += q * (t->fine ? wide[fine_slot(j)] : xq[j]);
            }
            float dx = t->xd[(size_t)r * blocks + b];
            const float *xs = t->xs + (size_t)r * blocks * 2;
            size_t h0 = half_index(b, 0, blocks), h1 = half_index(b, 1, blocks);
            if (gpb == 1) {
                acc += wd[b] * dx * (float)(sums[0] + sums[1]) + (wm ? wm[b] : 0.0f) * (xs[h0] + xs[h1]);
            } else {
                acc += wd[h0] * dx * (float)sums[0] + (wm ? wm[h0] : 0.0f) * xs[h0];
                acc += wd[h1] * dx * (float)sums[1] + (wm ? wm[h1] : 0.0f) * xs[h1];
            }
        }
        t->y[(size_t)r * t->n + col] = acc;
    }
}

#if !SPECDEC_AVX2
#define row_avx2 row_plain
#else
static void (*const specdec_plain_rows)(const task_t *, int, int, int) __attribute__((unused)) = row_plain;
#endif

static void run_part(const task_t *t, int part) {
    /* Output columns in contiguous slices of whole multiples of 8, one slice per part. */
    int per = ((t->n + t->parts - 1) / t->parts + 7) / 8 * 8;
    int start = part * per, end = start + per < t->n ? start + per : t->n;
#if SPECDEC_AVX512
    run_part_512(t, start, end);
    return;
#endif
    for (int col = start; col < end; col++) {
        for (int r0 = 0; r0 < t->rows; r0 += ROW_CHUNK) {
            int nr = t->rows - r0 < ROW_CHUNK ? t->rows - r0 : ROW_CHUNK;
            row_avx2(t, col, r0, nr);
        }
    }
}

/* A small pool of worker threads: each call hands every worker one slice of the output columns. Workers spin
 * briefly between calls (a forward pass makes hundreds of calls a few microseconds apart), then sleep. */
static task_t g_task;
static atomic_int g_generation, g_done;
static int g_workers;
static pthread_t g_threads[MAX_THREADS];
static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;
static int g_spin = 20000;
static pthread_mutex_t g_pool = PTHREAD_MUTEX_INITIALIZER; /* one caller at a time uses the workers */
/* A worker the system does not run (another program, or the app's own threads, on its core) leaves the caller waiting
 * for its share: a whole time slice for a product of a few hundred microseconds, and a 1.5B's step 2.6 times as long as
 * on one thread. Where the caller waited longer for the workers than its own share took, the next products run on the
 * caller alone, 64 of them, then twice as many each time it happens again, up to 65536 (a few hundred tokens of a
 * 1.5B); one that does not wait starts the count at 64 again. Guarded by g_pool. */
static int g_alone, g_alone_next = 64;

static double seconds_now(void) {
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    return (double)at.tv_sec + 1e-9 * (double)at.tv_nsec;
}

static void *worker_main(void *arg) {
    int id = (int)(intptr_t)arg, seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&g_generation, memory_order_acquire) == seen) {
            if (++spins > g_spin) {
                pthread_mutex_lock(&g_mutex);
                while (atomic_load(&g_generation) == seen) pthread_cond_wait(&g_wake, &g_mutex);
                pthread_mutex_unlock(&g_mutex);
            }
#if SPECDEC_AVX2
            _mm_pause();
#endif
        }
        seen = atomic_load(&g_generation);
        if (id < g_task.parts) run_part(&g_task, id);
        atomic_fetch_add_explicit(&g_done, 1, memory_order_release);
    }
    return NULL;
}

static void ensure_workers(int wanted) {
    while (g_workers < wanted && g_workers < MAX_THREADS - 1) {
        if (pthread_create(&g_threads[g_workers], NULL, worker_main, (void *)(intptr_t)(g_workers + 1)) != 0) break;
        pthread_detach(g_threads[g_workers]);
        g_workers++;
    }
}

void specdec_set_spin(int spin) { g_spin = spin; }

/* A forked child (the app decodes in one) has only the thread that forked: forget the parent's workers and locks,
 * so that its first call starts workers of its own instead of waiting for ones that do not exist there. */
static void forget_workers_after_fork(void) {
    g_workers = 0;
    atomic_store(&g_generation, 0);
    atomic_store(&g_done, 0);
    pthread_mutex_init(&g_mutex, NULL);
    pthread_cond_init(&g_wake, NULL);
    pthread_mutex_init(&g_pool, NULL);
}

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, forget_workers_after_fork);
}

/* y[rows, n] = x[rows, k] @ W.T for a weight of `kind` (0: u4, 1: s8) with groups of g values; wm NULL for a weight
 * whose offsets are all zero. `tables` 1 (AVX-512 builds, k a multiple of 256): wd points at a K-quant's own tables,
 * k_table_bytes a row, and wm is only non-NULL where the weight has offsets; `tables` 2 (AVX-512 builds): wd and wm
 * point at half-precision floats, one a group.
 * scratch: at least rows * (2 * k + 24 * (k / 32)) bytes, 4-byte aligned.
 * Returns 0, or -1 for shapes it cannot take. */
int specdec_qmatmul(int kind, const uint8_t *w, const float *wd, const float *wm, int n, int k, int g, int tables,
                    const float *x, int rows, float *y, void *scratch, int threads, int fine) {
    if (k % QBLOCK != 0 || (g != 16 && g != 32) || (kind != 0 && kind != 1) || (kind == 0 && g != 32) || rows < 1)
        return -1;
    if ((tables && !SPECDEC_AVX512) || (tables == 1 && k % 256 != 0) || tables < 0 || tables > 2) return -1;
    int blocks = k / QBLOCK;
    float *xd = (float *)scratch;
    float *xs = xd + (size_t)rows * blocks;
    float *xw = xs + (size_t)rows * blocks * 2;
    float *xg = xw + (size_t)rows * blocks;
    int8_t *xq = (int8_t *)(xg + (size_t)rows * blocks * 2);
    fine = fine != 0;
    quantise_rows(x, rows, k, fine, g, xq, xd, xs, xw, xg);
    task_t task = {kind, w, wd, wm, n, k, g, xq, xd, xs, xw, xg, rows, y, 1, fine, tables};
    int parts = threads < 1 ? 1 : (threads > MAX_THREADS ? MAX_THREADS : threads);
    if (n < 64 * parts) parts = 1;  /* too little work to share */
    /* A second thread calling while the workers are busy (a draft beside a verifier) computes alone: the values do
     * not depend on how the columns are split. */
    if (parts > 1 && pthread_mutex_trylock(&g_pool) != 0) parts = 1;
    if (parts > 1 && g_alone > 0) {  /* the workers lagged a moment ago */
        g_alone--;
        pthread_mutex_unlock(&g_pool);
        parts = 1;
    }
    task.parts = parts;
    if (parts == 1) {
        run_part(&task, 0);
        return 0;
    }
    ensure_workers(parts - 1);
    if (g_workers < parts - 1) task.parts = parts = g_workers + 1;
    g_task = task;
    atomic_store(&g_done, 0);
    pthread_mutex_lock(&g_mutex);
    atomic_fetch_add_explicit(&g_generation, 1, memory_order_release);
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_mutex);
    double start = seconds_now();
    run_part(&g_task, 0);
    double mine = seconds_now();
    while (atomic_load_explicit(&g_done, memory_order_acquire) < g_workers) {
#if SPECDEC_AVX2
        _mm_pause();
#endif
    }
    double waited = seconds_now() - mine;
    if (waited > (mine - start) + 50e-6) {
        g_alone = g_alone_next;
        if (g_alone_next < 65536) g_alone_next *= 2;
    } else {
        g_alone_next = 64;
    }
    pthread_mutex_unlock(&g_pool);
    return 0;
}

/* ---- The other row-wise steps of a decoder layer, for the lean layers (lean_layers.py) ----
 * Each computes every row alone, in a fixed order, so they are batch-invariant like the products above. */

/* y = w * x / sqrt(mean(x^2) + eps) for each of `rows` rows of `cols` values (y may be x). */
void specdec_rmsnorm(const float *x, const float *w, float eps, int rows, int cols, float *y) {
    for (int r = 0; r < rows; r++) {
        const float *src = x + (size_t)r * cols;
        float sum = 0.0f;
        for (int j = 0; j < cols; j++) sum += src[j] * src[j];
        float inv = 1.0f / sqrtf(sum / (float)cols + eps);
        float *dst = y + (size_t)r * cols;
        for (int j = 0; j < cols; j++) dst[j] = w[j] * (src[j] * inv);
    }
}

/* Rotary position embedding in place, halves rotated (as transformers' llama applies it): for each row's heads,
 * x[i] = x[i] cos[i] - x[i + d/2] sin[i] and x[i + d/2] = x[i + d/2] cos[i + d/2] + x[i] sin[i + d/2].
 * x: rows of `heads * dim` values `stride` floats apart; cos, sin: [rows, dim]. */
void specdec_rope(float *x, long stride, int rows, int heads, int dim, const float *cos_, const float *sin_) {
    int half = dim / 2;
    for (int r = 0; r < rows; r++) {
        const float *c = cos_ + (size_t)r * dim, *s = sin_ + (size_t)r * dim;
        for (int h = 0; h < heads; h++) {
            float *p = x + (size_t)r * stride + (size_t)h * dim;
            for (int i = 0; i < half; i++) {
                float a = p[i], b = p[i + half];
                p[i] = a * c[i] - b * s[i];
                p[i + half] = b * c[i + half] + a * s[i + half];
            }
        }
    }
}

static inline float dot(const float *a, const float *b, int n) {
#if SPECDEC_AVX2
    if (n % 8 == 0) {
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
        return hsum8(acc);
    }
#endif
    float sum = 0.0f;
    for (int i = 0; i < n; i++) sum += a[i] * b[i];
    return sum;
}

#if SPECDEC_AVX512
/* e^x for x <= 0 in 16 lanes, to within a unit or two in the last place: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by
 * its Taylor series to r^7 (the next term is below 6e-9 of the value), times 2^n. The same steps in every lane. */
static inline __m512 exp_lanes(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* One query row's heads over the `count` keys it may see (their positions in `seen`, in order), for heads of 16 *
 * `chunks` values, `share` query heads of one key head at a time (they read each key and value once): each score a
 * dot product in 16 lanes, the weights' exponentials 16 at a time in the order of the seen keys, and the values
 * summed key after key. The keys are numbered by their place among those seen, not by their position in the cache,
 * so a tree's node and the same token decoded alone make the same operations. scores: 4 * `count` floats. */
ALWAYS_INLINE void attend_row_512_of(const int chunks, const int share, const float *q, int heads, const float *k,
                                     const float *v, long head_stride, long pos_stride, int group, const int *seen,
                                     int count, float scale, float *out, float *scores) {
    const int dim = 16 * chunks;
    for (int h0 = 0; h0 < heads; h0 += share) {
        const float *kh = k + (size_t)(h0 / group) * head_stride, *vh = v + (size_t)(h0 / group) * head_stride;
        __m512 qv[4][8];
        float top[4];
        for (int g = 0; g < share; g++) {
            for (int c = 0; c < chunks; c++) qv[g][c] = _mm512_loadu_ps(q + (size_t)(h0 + g) * dim + 16 * c);
            top[g] = -INFINITY;
        }
        for (int t = 0; t < count; t++) {
            const float *kj = kh + (size_t)seen[t] * pos_stride;
            __m512 kv[8];
            for (int c = 0; c < chunks; c++) kv[c] = _mm512_loadu_ps(kj + 16 * c);
            for (int g = 0; g < share; g++) {
                __m512 acc = _mm512_mul_ps(qv[g][0], kv[0]);
                for (int c = 1; c < chunks; c++) acc = _mm512_fmadd_ps(qv[g][c], kv[c], acc);
                float score = scale * _mm512_reduce_add_ps(acc);
                scores[(size_t)g * count + t] = score;
                top[g] = score > top[g] ? score : top[g];
            }
        }
        float sum[4];
        for (int g = 0; g < share; g++) {
            float *row = scores + (size_t)g * count;
            __m512 total = _mm512_setzero_ps(), peak = _mm512_set1_ps(top[g]);
            for (int t = 0; t < count; t += 16) {
                const __mmask16 some = (__mmask16)(count - t >= 16 ? 0xFFFF : (1u << (count - t)) - 1);
                __m512 weight = _mm512_maskz_mov_ps(some, exp_lanes(_mm512_sub_ps(_mm512_maskz_loadu_ps(some, row + t),
                                                                                   peak)));
                _mm512_mask_storeu_ps(row + t, some, weight);
                total = _mm512_add_ps(total, weight);
            }
            sum[g] = _mm512_reduce_add_ps(total);
        }
        __m512 o[4][8];
        for (int g = 0; g < share; g++)
            for (int c = 0; c < chunks; c++) o[g][c] = _mm512_setzero_ps();
        for (int t = 0; t < count; t++) {
            const float *vj = vh + (size_t)seen[t] * pos_stride;
            __m512 vv[8];
            for (int c = 0; c < chunks; c++) vv[c] = _mm512_loadu_ps(vj + 16 * c);
            for (int g = 0; g < share; g++) {
                __m512 weight = _mm512_set1_ps(scores[(size_t)g * count + t]);
                for (int c = 0; c < chunks; c++) o[g][c] = _mm512_fmadd_ps(weight, vv[c], o[g][c]);
            }
        }
        for (int g = 0; g < share; g++) {
            __m512 inv = _mm512_set1_ps(sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f);
            for (int c = 0; c < chunks; c++)
                _mm512_storeu_ps(out + (size_t)(h0 + g) * dim + 16 * c, _mm512_mul_ps(o[g][c], inv));
        }
    }
}

/* Heads of 64 and of 128 values (nearly every model the loader takes), with loops of constant length, and as many
 * query heads of a key head at once as their sums fit the registers; other sizes one head at a time. */
static void attend_row_512(const float *q, int heads, int dim, const float *k, const float *v, long head_stride,
                           long pos_stride, int group, const int *seen, int count, float scale, float *out,
                           float *scores) {
    if (dim == 64 && group % 4 == 0)
        attend_row_512_of(4, 4, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out, scores);
    else if (dim == 64 && group % 3 == 0)
        attend_row_512_of(4, 3, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out, scores);
    else if (dim == 64 && group % 2 == 0)
        attend_row_512_of(4, 2, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out, scores);
    else if (dim == 64)
        attend_row_512_of(4, 1, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out, scores);
    else if (dim == 128 && group % 2 == 0)
        attend_row_512_of(8, 2, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out, scores);
    else if (dim == 128)
        attend_row_512_of(8, 1, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out, scores);
    else
        attend_row_512_of(dim / 16, 1, q, heads, k, v, head_stride, pos_stride, group, seen, count, scale, out,
                          scores);
}
#endif

/* Attention of each query row alone over the keys it may see, in key order: softmax(scale q.k) . v per head, query
 * head h reading key head h / (heads / kv_heads).
 * q: rows of heads * dim values, `q_stride` floats apart. k, v: [kv_heads, keys, dim] with strides (in floats) between
 * heads and between positions. visible: [rows, keys] bytes (nonzero: may attend), or NULL for causal rows that end
 * the keys (row r sees keys 0 .. keys - rows + r). out: [rows, heads * dim]. scratch: 5 * `keys` floats. */
void specdec_attend(const float *q, long q_stride, int rows, int heads, int dim, const float *k, const float *v,
                    long head_stride, long pos_stride, int kv_heads, int keys, const uint8_t *visible, float scale,
                    float *out, float *scratch) {
    int group = heads / kv_heads;
#if SPECDEC_AVX512
    if (dim % 16 == 0 && dim <= 128) {
        int *seen_at = (int *)(scratch + 4 * (size_t)keys);
        for (int r = 0; r < rows; r++) {
            const uint8_t *seen = visible ? visible + (size_t)r * keys : NULL;
            int last = visible ? keys - 1 : keys - rows + r, count = 0;
            for (int j = 0; j <= last; j++)
                if (!seen || seen[j]) seen_at[count++] = j;
            attend_row_512(q + (size_t)r * q_stride, heads, dim, k, v, head_stride, pos_stride, group, seen_at, count,
                           scale, out + (size_t)r * heads * dim, scratch);
        }
        return;
    }
#endif
    for (int r = 0; r < rows; r++) {
        const uint8_t *seen = visible ? visible + (size_t)r * keys : NULL;
        int last = visible ? keys - 1 : keys - rows + r;
        for (int h = 0; h < heads; h++) {
            const float *qh = q + (size_t)r * q_stride + (size_t)h * dim;
            const float *kh = k + (size_t)(h / group) * head_stride, *vh = v + (size_t)(h / group) * head_stride;
            float *o = out + (size_t)r * heads * dim + (size_t)h * dim;
            float top = -INFINITY;
            for (int j = 0; j <= last; j++) {
                if (seen && !seen[j]) continue;
                scratch[j] = scale * dot(qh, kh + (size_t)j * pos_stride, dim);
                if (scratch[j] > top) top = scratch[j];
            }
            float total = 0.0f;
            for (int i = 0; i < dim; i++) o[i] = 0.0f;
            for (int j = 0; j <= last; j++) {
                if (seen && !seen[j]) continue;
                float weight = expf(scratch[j] - top);
                total += weight;
                const float *vj = vh + (size_t)j * pos_stride;
                for (int i = 0; i < dim; i++) o[i] += weight * vj[i];
            }
            float inv = total > 0.0f ? 1.0f / total : 0.0f;
            for (int i = 0; i < dim; i++) o[i] *= inv;
        }
    }
}

/* ---- A whole decoder layer in two calls (lean_layers.py's fused path) ----
 * The same steps as the lean layer's parts, in the same order, each row alone: the Python between them cost a small
 * model more than its products did. The first call ends where the KV cache (transformers' object) takes the new keys
 * and values; the second starts from the cache's keys. */

typedef struct {
    int kind, n, k, g, tables;
    const uint8_t *w;
    const float *wd, *wm, *bias;  /* bias: NULL for none */
} qweight_t;

typedef struct {
    int width, heads, kv_heads, dim, inter;
    float eps, qk_eps, scale;
    const float *in_norm, *post_norm, *q_norm, *k_norm;  /* q_norm, k_norm: NULL for none (Qwen3 has them) */
    qweight_t qkv, o, gate_up, down;
} layer_t;

/* h[r, j] = silu(gate) * up for rows of [gate (inter values) | up (inter values)]: the SwiGLU MLP's middle, for the
 * fused layer and for the lean layer's parts alike, so that both compute the same bits. */
void specdec_silu_mul(const float *gate_up, int rows, int inter, float *h) {
    for (size_t r = 0; r < (size_t)rows; r++) {
        const float *gate = gate_up + r * 2 * inter, *up = gate + inter;
        float *out = h + r * inter;
        for (int j = 0; j < inter; j++) out[j] = gate[j] / (1.0f + expf(-gate[j])) * up[j];
    }
}

static int product(const qweight_t *wt, const float *x, int rows, float *y, void *scratch, int threads, int fine) {
    int status = specdec_qmatmul(wt->kind, wt->w, wt->wd, wt->wm, wt->n, wt->k, wt->g, wt->tables, x, rows, y, scratch,
                                 threads, fine);
    if (status == 0 && wt->bias)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < wt->n; j++) y[(size_t)r * wt->n + j] += wt->bias[j];
    return status;
}

/* qkv [rows, (heads + 2 kv_heads) * dim] = the layer's query, key and value rows of x [rows, width], normed per head
 * where the layer says so, queries and keys rotated. work: rows * width floats. */
int specdec_layer_qkv(const layer_t *L, const float *x, int rows, const float *cos_, const float *sin_, float *qkv,
                      float *work, void *scratch, int threads, int fine) {
    specdec_rmsnorm(x, L->in_norm, L->eps, rows, L->width, work);
    if (product(&L->qkv, work, rows, qkv, scratch, threads, fine) != 0) return -1;
    int stride = L->qkv.n, kv_at = L->heads * L->dim;
    if (L->q_norm)
        for (int r = 0; r < rows; r++) {
            float *row = qkv + (size_t)r * stride;
            specdec_rmsnorm(row, L->q_norm, L->qk_eps, L->heads, L->dim, row);
            specdec_rmsnorm(row + kv_at, L->k_norm, L->qk_eps, L->kv_heads, L->dim, row + kv_at);
        }
    specdec_rope(qkv, stride, rows, L->heads, L->dim, cos_, sin_);
    specdec_rope(qkv + kv_at, stride, rows, L->kv_heads, L->dim, cos_, sin_);
    return 0;
}

/* y [rows, width] = x plus the layer's attention over the cache's keys k, v ([kv_heads, keys, dim] at the given
 * strides) for the queries in qkv, plus its MLP (SiLU-gated) on the sum. work: rows * (3 * width + heads * dim
 * + 3 * inter) + 5 * keys floats. */
int specdec_layer_rest(const layer_t *L, const float *x, float *y, int rows, const float *qkv, const float *k,
                       const float *v, long head_stride, long pos_stride, int keys, const uint8_t *visible,
                       float *work, void *scratch, int threads, int fine) {
    size_t n = (size_t)rows;
    float *attended = work, *out = attended + n * L->heads * L->dim, *normed = out + n * L->width;
    float *gate_up = normed + n * L->width, *hidden = gate_up + n * 2 * L->inter, *weights = hidden + n * L->inter;
    specdec_attend(qkv, L->qkv.n, rows, L->heads, L->dim, k, v, head_stride, pos_stride, L->kv_heads, keys, visible,
                   L->scale, attended, weights);
    if (product(&L->o, attended, rows, out, scratch, threads, fine) != 0) return -1;
    for (size_t i = 0; i < n * L->width; i++) y[i] = x[i] + out[i];
    specdec_rmsnorm(y, L->post_norm, L->eps, rows, L->width, normed);
    if (product(&L->gate_up, normed, rows, gate_up, scratch, threads, fine) != 0) return -1;
    specdec_silu_mul(gate_up, rows, L->inter, hidden);
    if (product(&L->down, hidden, rows, out, scratch, threads, fine) != 0) return -1;
    for (size_t i = 0; i < n * L->width; i++) y[i] += out[i];
    return 0;
}

/* The whole layer in one call, for rows whose keys and values the KV cache keeps at positions start .. start + rows - 1
 * of its buffers key, value ([kv_heads, capacity, dim] at the given strides; the positions before start hold the
 * earlier rows'): the query, key and value rows (specdec_layer_qkv), the new keys and values stored, then
 * specdec_layer_rest over every key up to the new ones. The same operations as the two calls with the store between
 * them, so the same bits. work: rows * (qkv.n + 3 * width + heads * dim + 3 * inter) + 5 * (start + rows) floats. */
int specdec_layer_step(const layer_t *L, const float *x, float *y, int rows, const float *cos_, const float *sin_,
                       float *key, float *value, long head_stride, long pos_stride, int start, const uint8_t *visible,
                       float *work, void *scratch, int threads, int fine) {
    float *qkv = work, *rest = work + (size_t)rows * L->qkv.n;
    if (specdec_layer_qkv(L, x, rows, cos_, sin_, qkv, rest, scratch, threads, fine) != 0) return -1;
    int k_at = L->heads * L->dim, v_at = k_at + L->kv_heads * L->dim;
    for (int r = 0; r < rows; r++) {
        const float *row = qkv + (size_t)r * L->qkv.n;
        for (int h = 0; h < L->kv_heads; h++) {
            size_t at = (size_t)h * head_stride + (size_t)(start + r) * pos_stride;
            memcpy(key + at, row + k_at + h * L->dim, (size_t)L->dim * sizeof(float));
            memcpy(value + at, row + v_at + h * L->dim, (size_t)L->dim * sizeof(float));
        }
    }
    return specdec_layer_rest(L, x, y, rows, qkv, key, value, head_stride, pos_stride, start + rows, visible, rest,
                              scratch, threads, fine);
}

/* Every decoder layer of a model in one call: specdec_layer_step for layers[0] .. layers[n - 1] in turn, each layer's
 * output the next one's input, layer i's keys and values stored into key[i], value[i] at the strides given for it.
 * x [rows, width] is the first layer's input; y receives the last layer's output. The same calls as the layers one by
 * one, so the same bits. work: as specdec_layer_step's for the widest layer, plus 2 * rows * width floats. */
int specdec_stack_step(const layer_t *const *layers, int n, const float *x, float *y, int rows, const float *cos_,
                       const float *sin_, float *const *key, float *const *value, const long *head_stride,
                       const long *pos_stride, int start, const uint8_t *visible, float *work, void *scratch,
                       int threads, int fine) {
    size_t width = (size_t)layers[0]->width;
    float *hold[2] = {work, work + (size_t)rows * width}, *rest = work + 2 * (size_t)rows * width;
    const float *in = x;
    for (int i = 0; i < n; i++) {
        float *out = i == n - 1 ? y : hold[i % 2];
        if ((size_t)layers[i]->width != width ||
            specdec_layer_step(layers[i], in, out, rows, cos_, sin_, key[i], value[i], head_stride[i], pos_stride[i],
                               start, visible, rest, scratch, threads, fine) != 0)
            return -1;
        in = out;
    }
    return 0;
}

/* ---- The weights' layout: natural, or interleaved (AVX-512 builds) ---- */

int specdec_layout(void) { return SPECDEC_AVX512; }

/* Where each natural column of a row lies in the interleaved layout: the byte, and for nibbles which half of it. */
typedef struct { int *at; uint8_t *nibble; int kind; size_t row_bytes; int k; } layout_map_t;

static int layout_map(layout_map_t *map, int kind, int g, int k) {
    if (k % QBLOCK != 0 || (g != 16 && g != 32) || (kind != 0 && kind != 1) || (kind == 0 && g != 32)) return -1;
    int groups = k / g;
    map->kind = kind, map->k = k, map->row_bytes = kind == 0 ? (size_t)k / 2 : (size_t)k;
    map->at = malloc(sizeof(int) * (size_t)k);
    map->nibble = malloc((size_t)k);
    if (!map->at || !map->nibble) { free(map->at); free(map->nibble); return -1; }
    for (int ti = 0; ti < groups; ti++)
        for (int v = 0; v < g; v++) {
            int column = natural_column(ti, v, groups, g), position = pair_position(ti, v / 2, groups, g) + v % 2;
            int nibble = 0;
            map->at[column] = kind == 0 ? nibble_byte(position, groups, &nibble) : position;
            map->nibble[column] = (uint8_t)nibble;
        }
    return 0;
}

static void layout_free(layout_map_t *map) { free(map->at); free(map->nibble); }

/* One row from the natural layout into the interleaved one, or back (to_natural); in and out must not overlap. */
static void relayout_row(const layout_map_t *map, const uint8_t *in, uint8_t *out, int to_natural) {
    if (map->kind == 1) {
        if (to_natural) for (int c = 0; c < map->k; c++) out[c] = in[map->at[c]];
        else for (int c = 0; c < map->k; c++) out[map->at[c]] = in[c];
        return;
    }
    memset(out, 0, map->row_bytes);
    for (int c = 0; c < map->k; c++) {
        int byte = c / 32 * 16 + c % 16, shift = c % 32 >= 16 ? 4 : 0, there = 4 * map->nibble[c];
        if (to_natural) out[byte] |= (uint8_t)(((in[map->at[c]] >> there) & 0x0F) << shift);
        else out[map->at[c]] |= (uint8_t)(((in[byte] >> shift) & 0x0F) << there);
    }
}

/* Rows [rows, k / 2 (nibbles) or k bytes] of a weight of `kind` with groups of g from the natural layout (q of
 * gguf_blocks' decoders, packed by qkernel.pack_rows) into the interleaved one, or back (to_natural); src and dst must
 * not overlap. Returns 0, or -1 for a shape it does not take. */
int specdec_relayout(int kind, int g, const uint8_t *src, uint8_t *dst, int rows, int k, int to_natural) {
    layout_map_t map;
    if (layout_map(&map, kind, g, k) != 0 || rows < 0) return -1;
    for (size_t r = 0; r < (size_t)rows; r++)
        relayout_row(&map, src + r * map.row_bytes, dst + r * map.row_bytes, to_natural);
    layout_free(&map);
    return 0;
}

/* ---- Decoding a GGUF tensor's blocks straight into the layout above (the loader's fast path) ----
 * The same numbers as gguf_blocks.py's decoders followed by qkernel.pack_rows and kernel_order: tested equal. */

static float half_to_float(const uint8_t *at) {
    uint16_t h = (uint16_t)(at[0] | (at[1] << 8));
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF, bits;
    if (exponent == 0) {
        if (mantissa == 0) bits = sign;
        else {  /* subnormal: normalise */
            int shift = 0;
            while (!(mantissa & 0x400)) { mantissa <<= 1; shift++; }
            bits = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3FF) << 13);
        }
    } else if (exponent == 31) bits = sign | 0x7F800000u | (mantissa << 13);
    else bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

enum { T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_Q4_K, T_Q5_K, T_Q6_K };

static void k_scales(const uint8_t *s, float *sc, float *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = (float)(s[j] & 63);
        mn[j] = (float)(s[j + 4] & 63);
        sc[j + 4] = (float)((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
        mn[j + 4] = (float)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
}

/* One block of `type`: its values into q (nibble-packed for the u4 types, else signed bytes) and its groups' scales
 * and offsets into d and m, in natural group order. */
static void decode_block(int type, const uint8_t *b, uint8_t *q, float *d, float *m) {
    switch (type) {
    case T_Q4_0: d[0] = half_to_float(b); m[0] = -8.0f * d[0]; memcpy(q, b + 2, 16); break;
    case T_Q4_1: d[0] = half_to_float(b); m[0] = half_to_float(b + 2); memcpy(q, b + 4, 16); break;
    case T_Q5_0: case T_Q5_1: {
        int one = type == T_Q5_1, at = one ? 4 : 2;
        const uint8_t *qs = b + at + 4;
        uint32_t qh = (uint32_t)b[at] | ((uint32_t)b[at + 1] << 8) | ((uint32_t)b[at + 2] << 16) | ((uint32_t)b[at + 3] << 24);
        d[0] = half_to_float(b);
        m[0] = one ? half_to_float(b + 2) : 0.0f;
        for (int j = 0; j < 32; j++) {
            int low = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
            int value = low | (int)(((qh >> j) & 1) << 4);
            ((int8_t *)q)[j] = (int8_t)(one ? value : value - 16);
        }
        break;
    }
    case T_Q8_0: d[0] = half_to_float(b); m[0] = 0.0f; memcpy(q, b + 2, 32); break;
    case T_Q4_K: case T_Q5_K: {
        float dd = half_to_float(b), dmin = half_to_float(b + 2), sc[8], mn[8];
        k_scales(b + 4, sc, mn);
        for (int g = 0; g < 8; g++) { d[g] = dd * sc[g]; m[g] = -(dmin * mn[g]); }
        if (type == T_Q4_K) {
            for (int c = 0; c < 4; c++) {
                const uint8_t *qs = b + 16 + 32 * c;
                uint8_t *lo = q + 32 * c, *hi = lo + 16;  /* groups 2c and 2c + 1, 16 bytes each */
                for (int j = 0; j < 16; j++) {
                    lo[j] = (uint8_t)((qs[j] & 0x0F) | ((qs[j + 16] & 0x0F) << 4));
                    hi[j] = (uint8_t)((qs[j] >> 4) | (qs[j + 16] & 0xF0));
                }
            }
        } else {
            const uint8_t *qh = b + 16, *qs = b + 48;
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) {
                    int low = qs[32 * c + l] & 0x0F, high = qs[32 * c + l] >> 4;
                    ((int8_t *)q)[64 * c + l] = (int8_t)(low | (((qh[l] >> (2 * c)) & 1) << 4));
                    ((int8_t *)q)[64 * c + 32 + l] = (int8_t)(high | (((qh[l] >> (2 * c + 1)) & 1) << 4));
                }
        }
        break;
    }
    case T_Q6_K: {
        float dd = half_to_float(b + 208);
        for (int g = 0; g < 16; g++) { d[g] = dd * (float)(int8_t)b[192 + g]; m[g] = 0.0f; }
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    int low = k == 0 ? ql[l] & 0x0F : k == 1 ? ql[32 + l] & 0x0F : k == 2 ? ql[l] >> 4 : ql[32 + l] >> 4;
                    int high = (qh[l] >> (2 * k)) & 3;
                    ((int8_t *)q)[128 * h + 32 * k + l] = (int8_t)((low | (high << 4)) - 32);
                }
        }
        break;
    }
    }
}

/* The tables of one K-quant block (256 values) into a row's own tables (k_table_bytes): its groups' integer scales and
 * offsets and its float scales, block b of the row's `blocks`. */
static void k_block_tables(int type, const uint8_t *b, uint8_t *table, int blocks, int block) {
    int groups = type == T_Q6_K ? 16 * blocks : 8 * blocks;
    if (type == T_Q6_K) {
        int halves_blocks = 8 * blocks;  /* blocks of 32 */
        for (int g = 0; g < 16; g++) {
            int b32 = 8 * block + g / 2;
            table[half_index(b32, g % 2, halves_blocks)] = b[192 + g];
        }
        float dd = half_to_float(b + 208);
        memcpy(table + groups + 4 * (size_t)block, &dd, sizeof dd);
        return;
    }
    const uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        table[8 * block + j] = s[j] & 63;
        table[groups + 8 * block + j] = s[j + 4] & 63;
        table[8 * block + j + 4] = (uint8_t)((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
        table[groups + 8 * block + j + 4] = (uint8_t)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
    float dd = half_to_float(b), dmin = half_to_float(b + 2);
    memcpy(table + 2 * (size_t)groups + 4 * (size_t)block, &dd, sizeof dd);
    memcpy(table + 2 * (size_t)groups + 4 * (size_t)(blocks + block), &dmin, sizeof dmin);
}

/* A tensor's rows [rows, bytes per row] of GGUF blocks of `type` -> the kernel's layout: q [rows, cols (/ 2 for the
 * u4 types)], d and m [rows, cols / group] in kernel order; or, with `tables` (K-quants in AVX-512 builds), the
 * row's own tables into d [rows, k_table_bytes] (m unused). Output row i is input row order[i] (order may be NULL).
 * Returns 0, or -1 for a type or shape it does not take. */
int specdec_decode(int type, const uint8_t *raw, int rows, int cols, const int *order, uint8_t *q, float *d, float *m,
                   int tables) {
    static const int per_block[] = {32, 32, 32, 32, 32, 256, 256, 256};
    static const int block_bytes[] = {18, 20, 22, 24, 34, 144, 176, 210};
    static const int groups_per_block[] = {1, 1, 1, 1, 1, 8, 8, 16};
    if (type < 0 || type > T_Q6_K || cols % per_block[type] != 0 || rows < 0) return -1;
    if (tables && (!SPECDEC_AVX512 || type < T_Q4_K)) return -1;
    int nibbles = type == T_Q4_0 || type == T_Q4_1 || type == T_Q4_K;
    int blocks = cols / per_block[type], gpb = groups_per_block[type], groups = blocks * gpb;
    int group = per_block[type] / gpb, qbytes = nibbles ? cols / 2 : cols, qblock = nibbles ? per_block[type] / 2 : per_block[type];
    /* A row's float tables, before they are reordered (groups of 16) or not kept (a K-quant's own tables instead). */
    int staged = group == 16 || tables;
    float *nd = staged ? malloc(sizeof(float) * 2 * (size_t)groups) : NULL, *nm = nd ? nd + groups : NULL;
    if (staged && !nd) return -1;
    /* An AVX-512 build's layout: each row decoded into `natural`, then laid out. */
    layout_map_t map = {0};
    uint8_t *natural = NULL;
    if (SPECDEC_AVX512 && (layout_map(&map, nibbles ? 0 : 1, group, cols) != 0 || !(natural = malloc(qbytes)))) {
        layout_free(&map);
        free(nd);
        return -1;
    }
    for (int r = 0; r < rows; r++) {
        const uint8_t *src = raw + (size_t)(order ? order[r] : r) * blocks * block_bytes[type];
        float *dr = staged ? nd : d + (size_t)r * groups, *mr = staged ? nm : m + (size_t)r * groups;
        uint8_t *row = natural ? natural : q + (size_t)r * qbytes;
        for (int b = 0; b < blocks; b++)
            decode_block(type, src + (size_t)b * block_bytes[type], row + (size_t)b * qblock, dr + (size_t)b * gpb,
                         mr + (size_t)b * gpb);
        if (natural) relayout_row(&map, natural, q + (size_t)r * qbytes, 0);
        if (tables) {
            uint8_t *table = (uint8_t *)d + (size_t)r * k_table_bytes(group, groups);
            for (int b = 0; b < blocks; b++)
                k_block_tables(type, src + (size_t)b * block_bytes[type], table, blocks, b);
            continue;
        }
        if (group == 16) {  /* groups of 16 in kernel order (half_index over blocks of 32) */
            int halves_blocks = cols / QBLOCK;
            for (int b = 0; b < halves_blocks; b++)
                for (int h = 0; h < 2; h++) {
                    d[(size_t)r * groups + half_index(b, h, halves_blocks)] = nd[2 * b + h];
                    m[(size_t)r * groups + half_index(b, h, halves_blocks)] = nm[2 * b + h];
                }
        }
    }
    free(nd);
    free(natural);
    if (natural) layout_free(&map);
    return 0;
}

/* x rounded to the nearest half-precision float (ties to even), as a float: what a table of halves keeps. */
static float half_value(float x) {
    float size = fabsf(x);
    if (!(size < 65504.0f)) return x;
    if (size < 6.103515625e-05f)  /* below the smallest normal half: a multiple of 2^-24 */
        return copysignf(nearbyintf(size * 16777216.0f) / 16777216.0f, x);
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint32_t rest = bits & 0x1FFFu, kept = bits & ~0x1FFFu;  /* 10 of float's 23 mantissa bits stay */
    if (rest > 0x1000u || (rest == 0x1000u && (kept & 0x2000u))) kept += 0x2000u;
    memcpy(&x, &kept, sizeof x);
    return x;
}

/* ---- A draft's wider weights narrowed to 4 bits (quantised.narrow_to_4_bits) ----
 * Rows of a signed-byte weight (kind 1) with groups of g, laid out as `layout` says (0 natural, 1 interleaved), with
 * a float scale and offset a group (wm NULL: none), a K-quant's own tables (`tables` 1) or halves (`tables` 2),
 * requantised to 4 bits with a minimum per group of 32 as gguf_blocks.requantise(bits=4) does, but with the scale and
 * the minimum rounded to half precision first (as Q4_1 keeps them, and the products' half tables read them): q4
 * [rows, k / 2] in pack_rows' natural nibble layout, d4 and m4 [rows, k / 32] (floats that halves hold exactly).
 * Returns 0, or -1. */
int specdec_narrow(int g, int tables, int layout, const uint8_t *w, const void *wd, const float *wm, int rows, int k,
                   uint8_t *q4, float *d4, float *m4) {
    layout_map_t map = {0};
    if (k % QBLOCK != 0 || (g != 16 && g != 32) || (layout && layout_map(&map, 1, g, k) != 0))
        return -1;
    int groups = k / g;
    float *values = malloc(sizeof(float) * (size_t)k);
    if (!values) { if (layout) layout_free(&map); return -1; }
    for (int r = 0; r < rows; r++) {
        const int8_t *q = (const int8_t *)w + (size_t)r * k;
        for (int ti = 0; ti < groups; ti++) {
            float scale, offset = 0.0f;
            if (tables == 0) {
                scale = ((const float *)wd)[(size_t)r * groups + ti];
                if (wm) offset = wm[(size_t)r * groups + ti];
            } else if (tables == 2) {
                scale = half_to_float((const uint8_t *)wd + 2 * ((size_t)r * groups + ti));
                if (wm) offset = half_to_float((const uint8_t *)wm + 2 * ((size_t)r * groups + ti));
            } else if (g == 32) {  /* as the products make them: d * sc and -(dmin * mn) */
                const uint8_t *table = (const uint8_t *)wd + (size_t)r * k_table_bytes(g, groups);
                float d, dmin;
                memcpy(&d, table + 2 * (size_t)groups + 4 * (size_t)(ti / 8), sizeof d);
                memcpy(&dmin, table + 2 * (size_t)groups + 4 * (size_t)(groups / 8 + ti / 8), sizeof dmin);
                scale = d * (float)table[ti];
                offset = -(dmin * (float)table[groups + ti]);
            } else {
                const uint8_t *table = (const uint8_t *)wd + (size_t)r * k_table_bytes(g, groups);
                float d;
                memcpy(&d, table + groups + 4 * (size_t)(ti / 16), sizeof d);
                scale = d * (float)(int8_t)table[ti];
            }
            for (int v = 0; v < g; v++) {
                int column = natural_column(ti, v, groups, g);
                values[column] = scale * (float)q[layout ? map.at[column] : column] + offset;
            }
        }
        for (int b = 0; b < k / QBLOCK; b++) {
            const float *x = values + (size_t)b * QBLOCK;
            float low = x[0], high = x[0];
            for (int j = 1; j < QBLOCK; j++) {  /* (fminf and fmaxf are calls) */
                low = x[j] < low ? x[j] : low;
                high = x[j] > high ? x[j] : high;
            }
            float d = half_value((high - low) / 15.0f), inv = d > 0.0f ? 1.0f / d : 0.0f;
            low = half_value(low);
            uint8_t *out = q4 + (size_t)r * (k / 2) + (size_t)b * 16;
            for (int j = 0; j < 16; j++) {
                long lo = lrintf((x[j] - low) * inv), hi = lrintf((x[j + 16] - low) * inv);
                lo = lo < 0 ? 0 : (lo > 15 ? 15 : lo);
                hi = hi < 0 ? 0 : (hi > 15 ? 15 : hi);
                out[j] = (uint8_t)(lo | (hi << 4));
            }
            d4[(size_t)r * (k / QBLOCK) + b] = d;
            m4[(size_t)r * (k / QBLOCK) + b] = low;
        }
    }
    free(values);
    if (layout) layout_free(&map);
    return 0;
}
