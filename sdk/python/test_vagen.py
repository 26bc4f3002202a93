"""Tests of the helper module, run by `cargo xtask test` (host/cli/tests/languages.rs) with
the machine's python3: `python3 -m unittest discover -s sdk/python`."""

import unittest

import vagen


class Helpers(unittest.TestCase):
    def test_rng_is_splitmix64(self):
        # SplitMix64's published first output for seed 0; the C and JS SDKs match it.
        self.assertEqual(vagen.Rng(0).next_u64(), 0xE220A8397B1DCDAF)
        r = vagen.Rng(7)
        counts = [0, 0, 0]
        for _ in range(3000):
            counts[r.below(3)] += 1
        self.assertTrue(all(900 < c < 1100 for c in counts), counts)
        self.assertTrue(0.0 <= vagen.Rng(1).unit() < 1.0)

    def test_actions_split_trim_cap_and_stop_at_invalid(self):
        spec = vagen.ActionSpec(["Left", "Down", "Right", "Up"], ",", 3)
        self.assertEqual(spec.parse(" left ,DOWN,, Right ").actions, [0, 1, 2])
        p = spec.parse("Up, Up, Up, Up, Up")
        self.assertEqual((len(p.actions), p.ignored), (3, 2))
        p = spec.parse("Up, jump, Left")
        self.assertEqual((p.actions, p.invalid, p.ignored), ([3], ["jump"], 1))
        self.assertEqual(spec.join([0, 3]), "Left, Up")

    def test_an_answer_over_the_cap_is_refused_before_it_is_split(self):
        spec = vagen.ActionSpec(["Left", "Right"], ",", 2, max_answer_len=10)
        p = spec.parse("Left, Left, Left")
        self.assertEqual((p.actions, p.invalid, p.ignored), ([], [vagen.too_long(16, 10)], 0))
        self.assertEqual(spec.parse("Left, Left").actions, [0, 0])
        self.assertEqual(len(vagen.ActionSpec(["Left"]).parse("," * (1 << 20)).invalid), 1)

    def test_config_resolution_names_the_problem(self):
        class E(vagen.Env):
            DEFAULT_CONFIG = {"size": 4, "rate": 0.5, "name": "x"}
            PRESETS = {"big": {"size": 8}}

        self.assertEqual(vagen.resolve_config(E, '{"preset": "big", "rate": 1}'), {"size": 8, "rate": 1.0, "name": "x"})
        for text, needle in [('{"sise": 3}', "sise"), ('{"size": 2.5}', "size"), ('{"size": true}', "size"),
                             ('{"preset": "huge"}', "huge"), ("[1]", "object"), ("{", "JSON")]:
            with self.assertRaises(vagen.BadConfig) as e:
                vagen.resolve_config(E, text)
            self.assertIn(needle, str(e.exception))

    def test_the_episode_protocol(self):
        class E(vagen.Env):
            def reset(self, seed):
                return vagen.Observation("start")

            def step(self, answer):
                return vagen.Step(done=True)

        s = vagen.Session(E, "")
        with self.assertRaises(vagen.InvalidState):
            s.step("x")
        s.reset(1)
        self.assertTrue(s.step("x").done)
        with self.assertRaises(vagen.InvalidState):
            s.step("x")

    def test_words(self):
        self.assertEqual(vagen.relative_position((1, 1), (2, 3)), "2 rows below and 1 column to the right of you")
        self.assertEqual(vagen.echo("<image>" * 100).count("<image>"), 0)
        self.assertEqual(vagen.grid_text(2, 2, lambda x, y: "P" if x == y else "_"), "P_\n_P")
        c = vagen.Canvas(4, 3, (1, 2, 3))
        c.fill_rect(-5, -5, 6, 6, (9, 9, 9))
        img = c.into_image()
        self.assertEqual((len(img.rgb), img.rgb[:3], img.rgb[-3:]), (36, bytes([9, 9, 9]), bytes([1, 2, 3])))


if __name__ == "__main__":
    unittest.main()
