//! The streaming driver: every episode goes on its own. Its next prompt goes to the policy
//! the moment its env step returns, and its answer to its env the moment the policy gives
//! it, on a thread of its own; meanwhile the policy works on the others (one engine step
//! per poll). A slow env holds its own episode, not the batch. What each episode sees and
//! does is what the turn-by-turn driver gives it: requests, seeds, parsing and records are
//! the same functions, and the model's draws do not depend on batch company.

use crate::driver::{Answered, EnvTurn, Play, Shown, env_turn};
use crate::{RolloutError, StreamingPolicy};
use std::collections::HashMap;
use std::sync::mpsc;
use vagen_runtime::{EnvPool, Environment};

impl<'a> Play<'a> {
    /// Plays every episode to its end, or to `max_turns`.
    pub(crate) fn stream(&mut self, policy: &mut dyn StreamingPolicy, max_turns: usize) -> Result<(), RolloutError> {
        let pool = std::mem::replace(&mut self.pool, EnvPool::new(vec![]));
        let mut envs: Vec<Option<Box<dyn Environment>>> = pool.into_envs().into_iter().map(Some).collect();
        let played = std::thread::scope(|scope| self.stream_in(scope, &mut envs, policy, max_turns));
        // An env still out (a policy error ended the loop) came back when the scope joined
        // its thread; it is dropped with its message.
        self.pool = EnvPool::new(envs.into_iter().flatten().collect());
        played
    }

    fn stream_in<'s>(
        &mut self,
        scope: &'s std::thread::Scope<'s, 'a>,
        envs: &mut [Option<Box<dyn Environment>>],
        policy: &mut dyn StreamingPolicy,
        max_turns: usize,
    ) -> Result<(), RolloutError> {
        let (config, record_states) = (self.config, self.shape.record_states);
        let (done, returned) = mpsc::channel::<(usize, Box<dyn Environment>, EnvTurn)>();
        let mut asked: HashMap<usize, Shown> = HashMap::new();
        let mut stepping: HashMap<usize, Answered> = HashMap::new();
        for i in 0..self.episodes.len() {
            self.ask(i, max_turns, policy, &mut asked)?;
        }
        loop {
            let answered = match (policy.pending(), stepping.is_empty()) {
                (0, true) => break,
                (0, false) => vec![],
                _ => policy.poll()?,
            };
            for (i, response) in answered {
                let shown = asked.remove(&i).ok_or(RolloutError::Unasked(i))?;
                let turn = self.episodes[i].traj.turns.len();
                let Some((shown, response)) = self.unanswered(i, turn, shown, response) else { continue };
                let (answer, parsed) = self.parse_one(i, &response);
                let env = envs[i].take().expect("an episode's env is home between its steps");
                let (done, sent) = (done.clone(), answer.clone());
                scope.spawn(move || {
                    let mut env = env;
                    let result = env_turn(env.as_mut(), &sent, config, record_states);
                    let _ = done.send((i, env, result));
                });
                stepping.insert(i, Answered { shown, response, parsed, answer });
            }
            // Steps that returned; with nothing for the policy to do, wait for one.
            let mut wait = policy.pending() == 0 && !stepping.is_empty();
            loop {
                let next = if wait { returned.recv().ok() } else { returned.try_recv().ok() };
                let Some((i, env, result)) = next else { break };
                wait = false;
                envs[i] = Some(env);
                let answered = stepping.remove(&i).expect("a returned step was sent");
                let turn = self.episodes[i].traj.turns.len();
                self.record_one(i, turn, answered, result);
                self.ask(i, max_turns, policy, &mut asked)?;
            }
        }
        Ok(())
    }

    /// Asks the policy for episode `i`'s next turn, when it goes on within `max_turns`.
    fn ask(
        &mut self,
        i: usize,
        max_turns: usize,
        policy: &mut dyn StreamingPolicy,
        asked: &mut HashMap<usize, Shown>,
    ) -> Result<(), RolloutError> {
        let turn = self.episodes[i].traj.turns.len();
        if turn >= max_turns {
            return Ok(());
        }
        let Some(shown) = self.episodes[i].current.take() else { return Ok(()) };
        let request = self.request(i, &shown, turn, None);
        asked.insert(i, shown);
        policy.submit(request)?;
        Ok(())
    }
}
