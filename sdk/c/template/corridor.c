/* A complete environment to start from: walk along a corridor to the flag. */
#include <stdlib.h>

#include "vagen.h"

static const char *const ACTIONS[] = {"Left", "Right", NULL};

const vagen_manifest VAGEN_MANIFEST = {
    .name = "corridor-c",
    .description = "Walk along a corridor to the flag.",
    .text = true,
    .actions = ACTIONS,
    .separator = ",",
    .max_actions_per_turn = 2,
    .default_max_turns = 10,
    .default_config = "{\"length\": 7, \"max_actions_per_episode\": 20}",
    .has_oracle = true,
};

struct vagen_env {
    long length, max_actions, taken, me, flag;
};

vagen_env *vagen_create(const char *config, char *error, size_t error_len) {
    vagen_config c;
    long length, max_actions;
    if (!vagen_config_parse(config, &c, error, error_len) ||
        !vagen_config_int(&c, "length", 7, 3, 50, &length, error, error_len) ||
        !vagen_config_int(&c, "max_actions_per_episode", 20, 1, 1000, &max_actions, error, error_len) ||
        !vagen_config_finish(&c, error, error_len))
        return NULL;
    vagen_env *e = calloc(1, sizeof *e);
    if (e) *e = (vagen_env){.length = length, .max_actions = max_actions};
    return e;
}

void vagen_destroy(vagen_env *e) { free(e); }

static void picture(vagen_env *e, vagen_text *t) {
    for (long i = 0; i < e->length; i++) vagen_text_push(t, i == e->me ? "P" : i == e->flag ? "F" : "_");
}

void vagen_reset(vagen_env *e, uint64_t seed, vagen_step *out) {
    vagen_rng rng = vagen_rng_new(seed);
    e->me = (long)vagen_rng_below(&rng, (uint64_t)e->length);
    do e->flag = (long)vagen_rng_below(&rng, (uint64_t)e->length);
    while (e->flag == e->me);
    e->taken = 0;
    picture(e, &out->text);
}

void vagen_step_answer(vagen_env *e, const char *answer, size_t len, vagen_step *out) {
    int actions[2];
    char invalid[65];
    size_t n = vagen_parse_actions(answer, len, ACTIONS, ",", 2, actions, invalid, sizeof invalid);
    vagen_text_push(&out->text, n ? "Executed:" : "No valid action was executed.");
    for (size_t i = 0; i < n && !out->success && e->taken < e->max_actions; i++) {
        long target = e->me + (actions[i] == 1 ? 1 : -1);
        e->taken++;
        out->valid_actions++;
        vagen_text_printf(&out->text, " %s", ACTIONS[actions[i]]);
        if (target >= 0 && target < e->length) {
            e->me = target;
            out->effective_actions++;
        }
        out->success = e->me == e->flag;
    }
    if (invalid[0]) vagen_text_printf(&out->text, " Invalid action \"%s\": valid actions are Left, Right.", invalid);
    out->reward = out->success ? 10.0 : 0.0;
    out->done = out->success || e->taken >= e->max_actions;
    vagen_text_push(&out->text, "\n");
    picture(e, &out->text);
}

void vagen_system_prompt(vagen_env *e, vagen_text *out) {
    (void)e;
    vagen_text_push(out, "P is you, F the flag, _ floor. Walk onto the flag. Actions: Left, Right (up to 2, separated by ',').");
}

void vagen_describe_state(vagen_env *e, vagen_text *out) {
    long d = e->flag - e->me;
    vagen_text_printf(out, "The flag is %ld cell%s to the %s.", labs(d), labs(d) == 1 ? "" : "s", d > 0 ? "right" : "left");
}

bool vagen_oracle(vagen_env *e, vagen_text *out) {
    vagen_text_push(out, e->flag > e->me ? "Right" : "Left");
    return true;
}
