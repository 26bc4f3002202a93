/* Write a vagen environment in C.
 *
 * Define `struct vagen_env`, the manifest `VAGEN_MANIFEST` and the functions marked
 * "you write" below; build with `sdk/c/build.sh YOUR_ENV_DIR OUT.wasm`. The SDK (vagen.c)
 * implements the component's exports over them: the episode protocol (no step before reset
 * or after done), conversion to the contract's types, and memory ownership. Helpers mirror
 * the Rust SDK: a growable text, a seeded Rng, answer splitting, config reading.
 *
 * Everything random in an episode must come from `vagen_rng_new(seed)`. */
#ifndef VAGEN_H
#define VAGEN_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- text ---------------------------------------------------------------------------- */

/* A growable string; zero-initialise it (`vagen_text t = {0};`). */
typedef struct {
    char *buf;
    size_t len, cap;
} vagen_text;

void vagen_text_push(vagen_text *t, const char *s);
void vagen_text_push_n(vagen_text *t, const char *s, size_t n);
void vagen_text_printf(vagen_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vagen_text_free(vagen_text *t);

/* ---- what an environment produces ------------------------------------------------------ */

#define VAGEN_MAX_IMAGES 4
#define VAGEN_MAX_METRICS 16

typedef struct {
    uint32_t width, height;
    uint8_t *rgb; /* malloc'ed width*height*3 bytes; the SDK takes ownership */
} vagen_image;

typedef struct {
    const char *name; /* a string literal */
    double value;
} vagen_metric;

/* What `reset` and `step` fill in. `reset` uses only `text` and the images. */
typedef struct {
    vagen_text text; /* one "<image>" marker per image: use vagen_push_image */
    vagen_image images[VAGEN_MAX_IMAGES];
    size_t n_images;
    double reward;
    bool done, success;
    uint32_t valid_actions, effective_actions;
    vagen_metric metrics[VAGEN_MAX_METRICS];
    size_t n_metrics;
} vagen_step;

/* Appends the image and its "<image>" marker. */
void vagen_push_image(vagen_step *s, vagen_image image);
void vagen_push_metric(vagen_step *s, const char *name, double value);

typedef struct {
    const char *name, *version, *description;
    bool text, image;           /* modalities */
    const char *const *actions; /* NULL-terminated action names, or NULL for free-form */
    const char *separator;
    uint32_t max_actions_per_turn, default_max_turns;
    const char *default_config; /* JSON object with every option and its default */
    bool has_oracle;
} vagen_manifest;

/* ---- you write ------------------------------------------------------------------------ */

typedef struct vagen_env vagen_env;

extern const vagen_manifest VAGEN_MANIFEST;

/* Builds an instance from the config JSON (see vagen_config_*). On a bad config return NULL
 * with a message in `error` naming the field. */
vagen_env *vagen_create(const char *config, char *error, size_t error_len);
void vagen_destroy(vagen_env *env);
void vagen_system_prompt(vagen_env *env, vagen_text *out);
void vagen_reset(vagen_env *env, uint64_t seed, vagen_step *out);
void vagen_step_answer(vagen_env *env, const char *answer, size_t len, vagen_step *out);
void vagen_describe_state(vagen_env *env, vagen_text *out);
/* An expert answer into `out`; return false when there is none. */
bool vagen_oracle(vagen_env *env, vagen_text *out);

/* ---- helpers --------------------------------------------------------------------------- */

/* SplitMix64: the same stream as the Python and JavaScript SDKs' Rng. */
typedef struct {
    uint64_t state;
} vagen_rng;
vagen_rng vagen_rng_new(uint64_t seed);
uint64_t vagen_rng_next(vagen_rng *r);
uint64_t vagen_rng_below(vagen_rng *r, uint64_t n); /* uniform in 0..n, n > 0 */
double vagen_rng_unit(vagen_rng *r);               /* uniform in [0, 1) */

/* Answers longer than this many bytes are refused by vagen_parse_actions before it reads
 * them; 1024 unless the env sets it (in vagen_create, say). */
extern size_t vagen_max_answer_len;

/* Splits an answer on `separator`, trims, skips empty pieces, matches names ignoring ASCII
 * case; reads at most `max` pieces and stops at the first unknown one, copying it into
 * `invalid` (cut to fit at a character boundary, `<image>` markers defused: safe to show). Returns how many actions it wrote to `out`. An answer over
 * vagen_max_answer_len bytes gives no action and "(an answer of N bytes; at most M are
 * read)" as the invalid piece. */
size_t vagen_parse_actions(const char *answer, size_t len, const char *const *names, const char *separator,
                           size_t max, int *out, char *invalid, size_t invalid_len);

/* A flat JSON config object: numbers, booleans and strings. */
#define VAGEN_CONFIG_MAX 32
typedef struct {
    size_t n;
    char keys[VAGEN_CONFIG_MAX][48];
    char values[VAGEN_CONFIG_MAX][64]; /* the raw value text, strings unquoted */
    bool is_string[VAGEN_CONFIG_MAX];
    bool used[VAGEN_CONFIG_MAX];
} vagen_config;

/* Parses `json` ("" means {}); false with a message on malformed input. */
bool vagen_config_parse(const char *json, vagen_config *c, char *error, size_t error_len);
/* The integer at `key` (or `fallback` when absent); false with a message naming the key
 * when it is not an integer within [min, max]. */
bool vagen_config_int(vagen_config *c, const char *key, long fallback, long min, long max, long *out, char *error,
                      size_t error_len);
/* False with a message naming the first key nothing asked for. */
bool vagen_config_finish(const vagen_config *c, char *error, size_t error_len);

#endif
