/* Lights Out, written in C with the vagen SDK: pressing a cell toggles it and its four
 * neighbours; switch every light off. Boards come from the seed by pressing random cells
 * of a dark board, so each is solvable; the oracle solves the presses over GF(2).
 * Build: sdk/c/build.sh examples/lights-out-c target/examples/lights-out-c.wasm */
#include <stdlib.h>
#include <string.h>

#include "vagen.h"

#define MAX_N 5

static const char *const CELLS[] = {"A1", "B1", "C1", "D1", "E1", "A2", "B2", "C2", "D2", "E2", "A3", "B3", "C3",
                                    "D3", "E3", "A4", "B4", "C4", "D4", "E4", "A5", "B5", "C5", "D5", "E5"};
/* The default 3×3 board's cells, for the manifest. */
static const char *const DEFAULT_CELLS[] = {"A1", "B1", "C1", "A2", "B2", "C2", "A3", "B3", "C3", NULL};

const vagen_manifest VAGEN_MANIFEST = {
    .name = "lights-out-c",
    .version = "0.1.0",
    .description = "Lights Out: switch every light off; written in C.",
    .text = true,
    .actions = DEFAULT_CELLS,
    .separator = ",",
    .max_actions_per_turn = 3,
    .default_max_turns = 10,
    .default_config = "{\"size\": 3, \"presses\": 0, \"max_actions_per_turn\": 3, \"max_actions_per_episode\": 30}",
    .has_oracle = true,
};

struct vagen_env {
    int n;
    long presses, per_turn, per_episode;
    const char *names[MAX_N * MAX_N + 1]; /* this size's cells, NULL-terminated */
    bool on[MAX_N * MAX_N];
    long actions_taken;
};

vagen_env *vagen_create(const char *config, char *error, size_t error_len) {
    vagen_config c;
    long size, presses, per_turn, per_episode;
    if (!vagen_config_parse(config, &c, error, error_len) ||
        !vagen_config_int(&c, "size", 3, 3, MAX_N, &size, error, error_len) ||
        !vagen_config_int(&c, "presses", 0, 0, 25, &presses, error, error_len) ||
        !vagen_config_int(&c, "max_actions_per_turn", 3, 1, 25, &per_turn, error, error_len) ||
        !vagen_config_int(&c, "max_actions_per_episode", 30, 1, 1000, &per_episode, error, error_len) ||
        !vagen_config_finish(&c, error, error_len))
        return NULL;
    vagen_env *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->n = (int)size;
    e->presses = presses;
    e->per_turn = per_turn;
    e->per_episode = per_episode;
    int k = 0;
    for (int r = 0; r < e->n; r++)
        for (int col = 0; col < e->n; col++) e->names[k++] = CELLS[r * MAX_N + col];
    e->names[k] = NULL;
    return e;
}

void vagen_destroy(vagen_env *e) { free(e); }

static void press(vagen_env *e, int cell) {
    int r = cell / e->n, c = cell % e->n;
    static const int dr[] = {0, -1, 1, 0, 0}, dc[] = {0, 0, 0, -1, 1};
    for (int k = 0; k < 5; k++) {
        int rr = r + dr[k], cc = c + dc[k];
        if (rr >= 0 && rr < e->n && cc >= 0 && cc < e->n) e->on[rr * e->n + cc] ^= 1;
    }
}

static int lights_on(const vagen_env *e) {
    int k = 0;
    for (int i = 0; i < e->n * e->n; i++) k += e->on[i];
    return k;
}

static void board(const vagen_env *e, vagen_text *t) {
    vagen_text_push(t, " ");
    for (int c = 0; c < e->n; c++) vagen_text_printf(t, " %c", 'A' + c);
    for (int r = 0; r < e->n; r++) {
        vagen_text_printf(t, "\n%d", r + 1);
        for (int c = 0; c < e->n; c++) vagen_text_push(t, e->on[r * e->n + c] ? " o" : " .");
    }
    vagen_text_push(t, "\n");
}

void vagen_reset(vagen_env *e, uint64_t seed, vagen_step *out) {
    vagen_rng rng = vagen_rng_new(seed);
    int cells = e->n * e->n;
    do {
        memset(e->on, 0, sizeof e->on);
        long k = e->presses ? e->presses : 1 + (long)vagen_rng_below(&rng, (uint64_t)cells / 2);
        /* k distinct cells: a partial Fisher-Yates shuffle. */
        int order[MAX_N * MAX_N];
        for (int i = 0; i < cells; i++) order[i] = i;
        for (long i = 0; i < k && i < cells; i++) {
            int j = (int)i + (int)vagen_rng_below(&rng, (uint64_t)(cells - i));
            int tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
            press(e, order[i]);
        }
    } while (lights_on(e) == 0); /* some press sets cancel out on 4×4 and 5×5 */
    e->actions_taken = 0;
    vagen_text_push(&out->text, "Current board:\n");
    board(e, &out->text);
}

void vagen_step_answer(vagen_env *e, const char *answer, size_t len, vagen_step *out) {
    int actions[25];
    char invalid[65];
    size_t n = vagen_parse_actions(answer, len, e->names, ",", (size_t)e->per_turn, actions, invalid, sizeof invalid);
    vagen_text pressed = {0};
    for (size_t i = 0; i < n && e->actions_taken < e->per_episode && !out->success; i++) {
        press(e, actions[i]);
        e->actions_taken++;
        out->valid_actions++;
        out->effective_actions++;
        vagen_text_printf(&pressed, "%s%s", pressed.len ? ", " : "", e->names[actions[i]]);
        out->success = lights_on(e) == 0;
    }
    if (pressed.len) vagen_text_printf(&out->text, "Pressed: %s.", pressed.buf);
    else vagen_text_push(&out->text, "No valid action was executed.");
    vagen_text_free(&pressed);
    if (invalid[0])
        vagen_text_printf(&out->text, " Invalid action \"%s\": valid cells are A1 to %c%d.", invalid, 'A' + e->n - 1,
                          e->n);
    out->done = out->success || e->actions_taken >= e->per_episode;
    if (out->success) {
        out->reward = 10.0;
        vagen_text_push(&out->text, " Every light is off: solved.");
    } else if (out->done) {
        vagen_text_push(&out->text, " No actions are left in this episode.");
    }
    vagen_text_push(&out->text, "\nCurrent board:\n");
    board(e, &out->text);
    vagen_push_metric(out, "lights-on", lights_on(e));
}

void vagen_system_prompt(vagen_env *e, vagen_text *out) {
    vagen_text_printf(out,
                      "You are playing Lights Out on a %dx%d board: o is a light that is on, . one that is off.\n"
                      "Pressing a cell toggles it and the cells directly above, below, left and right of it.\n"
                      "Goal: switch every light off. Reward: +10 when solved.\n"
                      "Actions: a cell name, column letter then row number (A1 to %c%d). Up to %ld per turn, "
                      "separated by ','.",
                      e->n, e->n, 'A' + e->n - 1, e->n, e->per_turn);
}

void vagen_describe_state(vagen_env *e, vagen_text *out) {
    vagen_text_printf(out, "%d of %d lights are on", lights_on(e), e->n * e->n);
    const char *sep = ": ";
    for (int i = 0; i < e->n * e->n; i++) {
        if (e->on[i]) {
            vagen_text_printf(out, "%s%s", sep, e->names[i]);
            sep = ", ";
        }
    }
    vagen_text_push(out, ".");
}

/* Which cells to press: Gaussian elimination over GF(2), one bit per cell, the board's
 * lights as the right-hand side (bit 31); free variables stay unpressed. */
bool vagen_oracle(vagen_env *e, vagen_text *out) {
    int cells = e->n * e->n;
    uint32_t rows[MAX_N * MAX_N];
    for (int j = 0; j < cells; j++) {
        vagen_env probe = *e;
        memset(probe.on, 0, sizeof probe.on);
        uint32_t row = 0;
        for (int i = 0; i < cells; i++) {
            press(&probe, i);
            if (probe.on[j]) row |= 1u << i;
            press(&probe, i);
        }
        rows[j] = row | ((uint32_t)e->on[j] << 31);
    }
    int pivot_of[MAX_N * MAX_N], rank = 0;
    for (int col = 0; col < cells; col++) {
        pivot_of[col] = -1;
        int r = rank;
        while (r < cells && !(rows[r] >> col & 1)) r++;
        if (r == cells) continue;
        uint32_t t = rows[r];
        rows[r] = rows[rank];
        rows[rank] = t;
        for (int k = 0; k < cells; k++)
            if (k != rank && (rows[k] >> col & 1)) rows[k] ^= rows[rank];
        pivot_of[col] = rank++;
    }
    int taken = 0;
    for (int col = 0; col < cells && taken < e->per_turn; col++) {
        if (pivot_of[col] >= 0 && (rows[pivot_of[col]] >> 31 & 1)) {
            vagen_text_printf(out, "%s%s", taken ? ", " : "", e->names[col]);
            taken++;
        }
    }
    return taken > 0;
}
