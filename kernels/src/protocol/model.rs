//! An exhaustive model check of the protocols' buffer reuse rules.
//!
//! Each rank runs a straight-line program of atomic steps mirroring its kernels
//! (one block, one word per slot or shard: the rules do not depend on sizes). The
//! checker explores every interleaving of the ranks' steps and fails on
//! - a read that sees data of another call or use than the one it expects
//!   (a buffer reused too early, or not re-armed), or
//! - a state where no rank can move but some have not finished (a wait that
//!   can never be satisfied, e.g. data erased by a re-arm), or
//! - a Lamport write (`Step::Push`) into a cell that is not armed: a word not
//!   re-armed since its last use, which a poll could take for the new data.
//!
//! The push family mixes its calls through the same three buffers
//! (`push_calls_program`): one-shot, two-shot (scatter copies in a slot's
//! part 0, sums in part 1) and the fused two-shot, whose rank also writes x of
//! its own shard into part 0 of its own slot and takes it back, re-armed, in
//! its step 4. Each call re-arms the previous call's buffer as far as that
//! call used it. Step 3's writer and step 4's reader of the own slot are
//! different threads of the rank (another block, even); with one program per
//! rank the model cannot order them against each other, so the Push rule
//! stands for what the reader needs: the word armed when this call's x is
//! written, i.e. re-armed exactly once since the call before took it.
//!
//! The programs use the counter arithmetic of [`super::sequence`], and negative
//! tests show the checker catches a protocol with too few buffers, a fused
//! two-shot that does not re-arm its own slot, and a re-arm short of what the
//! previous call used.

use std::collections::{HashMap, HashSet, VecDeque};

use super::sequence::{flag_reached, next_push_phase, rearm_phase, staging_half};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Cell {
    /// Push slot `slot` of buffer `buffer` in rank `owner`'s push region;
    /// `part` 0 is its packs [0, S) (a one-shot message, or a two-shot
    /// scatter copy, or a fused two-shot's own x in the owner's own slot),
    /// 1 its packs [S, 2S) (a two-shot sum).
    Slot {
        owner: usize,
        buffer: u32,
        slot: usize,
        part: u8,
    },
    /// Slot `slot` of area `area` of staging half `half` of rank `owner`
    /// (one-shot pull: area 0, slot 0; two-shot: area 0 is the scatter area,
    /// slot q holding rank q's copy of the owner's shard; area 1 the gather
    /// area, slot s holding shard s reduced by rank s).
    Stage {
        owner: usize,
        half: u64,
        area: u8,
        slot: usize,
    },
    /// Barrier flag in rank `owner`'s control block written by `source`.
    Flag { owner: usize, source: usize },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Value {
    Armed,
    /// Data of a call (push) or use (staging); `reduced` marks two-shot sums.
    Data {
        id: u32,
        reduced: bool,
    },
    Counter(u64),
    Empty,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Write(Cell, Value),
    /// A Lamport write: the cell must be armed (else a poll could take what
    /// it held for this write's data).
    Push(Cell, Value),
    /// Lamport poll: blocks while the cell is armed, then must hold `expect`.
    Consume(Cell, Value),
    /// Blocks until the flag reaches the target.
    WaitFlag(Cell, u64),
    /// A plain read after a barrier: must hold `expect`.
    Expect(Cell, Value),
}

type Program = Vec<Step>;

fn push_program(rank: usize, world: usize, calls: u32, buffers: u32) -> Program {
    let next = |p: u32| {
        if buffers == 3 {
            next_push_phase(p)
        } else {
            (p + 1) % buffers
        }
    };
    let rearm = |p: u32| {
        if buffers == 3 {
            rearm_phase(p)
        } else {
            (p + buffers - 1) % buffers
        }
    };
    let mut steps = Vec::new();
    let mut phase = 0;
    for call in 0..calls {
        let data = Value::Data {
            id: call,
            reduced: false,
        };
        // A rank's own slot is never written: it reads its own input.
        for owner in (0..world).filter(|&o| o != rank) {
            let slot = Cell::Slot {
                owner,
                buffer: phase,
                slot: rank,
                part: 0,
            };
            steps.push(Step::Write(slot, data));
        }
        for slot in (0..world).filter(|&s| s != rank) {
            let cell = Cell::Slot {
                owner: rank,
                buffer: phase,
                slot,
                part: 0,
            };
            steps.push(Step::Consume(cell, data));
        }
        for slot in (0..world).filter(|&s| s != rank) {
            let cell = Cell::Slot {
                owner: rank,
                buffer: rearm(phase),
                slot,
                part: 0,
            };
            steps.push(Step::Write(cell, Value::Armed));
        }
        phase = next(phase);
    }
    steps
}

/// A call of the push family, as far as its buffer use goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PushCall {
    /// one_shot_push (all-reduce, all-gather, and fused: the same slots).
    OneShot,
    /// two_shot_push's all-reduce: scatter copies in part 0, sums in part 1.
    TwoShot,
    /// two_shot_push_add_rmsnorm: as `TwoShot`, and x of the rank's own shard
    /// in part 0 of its own slot, which it takes and re-arms itself.
    FusedTwoShot,
    /// `FusedTwoShot` without its own-slot re-arm (a negative test).
    FusedTwoShotNoRearm,
}

impl PushCall {
    /// The parts of a peer's slot the call writes, which the next push-family
    /// call of the owner re-arms (as far as the call used them: push_used).
    fn parts(self) -> &'static [u8] {
        match self {
            PushCall::OneShot => &[0],
            _ => &[0, 1],
        }
    }
}

/// The push family's calls `calls` through the three buffers, in the order
/// the kernels take their steps: push (scatter), re-arm the previous call's
/// buffer (its peers' slots, as far as that call used them), receive; the
/// two-shot calls then send their sums and gather them, the fused one also
/// writing its own x into its own slot and taking it back (re-armed) in
/// step 4. `rearm_parts` overrides which parts a re-arm covers (a negative
/// test); `None`: the previous call's.
fn push_calls_program(
    rank: usize,
    world: usize,
    calls: &[PushCall],
    rearm_parts: Option<&'static [u8]>,
) -> Program {
    let peers = move || (0..world).filter(move |&p| p != rank);
    let slot = |owner, buffer, slot, part| Cell::Slot {
        owner,
        buffer,
        slot,
        part,
    };
    let mut steps = Vec::new();
    let mut phase = 0;
    let mut previous: Option<PushCall> = None;
    for (id, &call) in calls.iter().enumerate() {
        let id = id as u32;
        let data = Value::Data { id, reduced: false };
        let sum = Value::Data { id, reduced: true };
        // 1. This rank's data (one-shot: the message; two-shot: the copy of
        //    shard s) into slot `rank` of every peer.
        for owner in peers() {
            steps.push(Step::Push(slot(owner, phase, rank, 0), data));
        }
        // 2. The previous call's buffer, its peers' slots, re-armed.
        if let Some(before) = previous {
            for p in peers() {
                for &part in rearm_parts.unwrap_or(before.parts()) {
                    steps.push(Step::Write(
                        slot(rank, rearm_phase(phase), p, part),
                        Value::Armed,
                    ));
                }
            }
        }
        // 3. Every peer's data (two-shot: its copy of this rank's shard).
        for p in peers() {
            steps.push(Step::Consume(slot(rank, phase, p, 0), data));
        }
        if call != PushCall::OneShot {
            // The shard's sum (fused: x) to every peer, and into the own slot.
            for owner in peers() {
                steps.push(Step::Push(slot(owner, phase, rank, 1), sum));
            }
            let fused = matches!(call, PushCall::FusedTwoShot | PushCall::FusedTwoShotNoRearm);
            if fused && world > 1 {
                steps.push(Step::Push(slot(rank, phase, rank, 0), sum));
            }
            // 4. Every peer's sum; the fused call also its own x, re-armed once
            //    taken.
            for s in peers() {
                steps.push(Step::Consume(slot(rank, phase, s, 1), sum));
            }
            if fused && world > 1 {
                steps.push(Step::Consume(slot(rank, phase, rank, 0), sum));
                if call == PushCall::FusedTwoShot {
                    steps.push(Step::Write(slot(rank, phase, rank, 0), Value::Armed));
                }
            }
        }
        previous = Some(call);
        phase = next_push_phase(phase);
    }
    steps
}

#[derive(Clone, Copy, Debug)]
enum PullCall {
    OneShot,
    TwoShot,
}

/// The pull family: `calls` share one barrier counter and one use counter per
/// rank, as the kernels share CT_CTRL_PULL_SEQ / CT_CTRL_PULL_USE.
fn pull_program(rank: usize, world: usize, calls: &[PullCall], halves: u32) -> Program {
    let half_of = |u: u64| {
        if halves == 2 {
            staging_half(u)
        } else {
            u % halves as u64
        }
    };
    let mut steps = Vec::new();
    let mut seq = 0u64;
    let barrier = |steps: &mut Program, value: u64| {
        for owner in 0..world {
            let flag = Cell::Flag {
                owner,
                source: rank,
            };
            steps.push(Step::Write(flag, Value::Counter(value)));
        }
        for source in 0..world {
            let flag = Cell::Flag {
                owner: rank,
                source,
            };
            steps.push(Step::WaitFlag(flag, value));
        }
    };
    for (use_count, call) in calls.iter().enumerate() {
        let id = use_count as u32;
        let half = half_of(use_count as u64);
        let input = Value::Data { id, reduced: false };
        let sum = Value::Data { id, reduced: true };
        let stage = |owner, area, slot| Cell::Stage {
            owner,
            half,
            area,
            slot,
        };
        let peers = (0..world).filter(move |&p| p != rank);
        match call {
            PullCall::OneShot => {
                steps.push(Step::Write(stage(rank, 0, 0), input));
                seq += 1;
                barrier(&mut steps, seq);
                for peer in 0..world {
                    steps.push(Step::Expect(stage(peer, 0, 0), input));
                }
            }
            PullCall::TwoShot => {
                // Scatter: shard s of this rank's input to rank s.
                for s in peers.clone() {
                    steps.push(Step::Write(stage(s, 0, rank), input));
                }
                barrier(&mut steps, seq + 1);
                // Reduce shard `rank`, then send the sum to every peer.
                for p in peers.clone() {
                    steps.push(Step::Expect(stage(rank, 0, p), input));
                }
                for p in peers.clone() {
                    steps.push(Step::Write(stage(p, 1, rank), sum));
                }
                barrier(&mut steps, seq + 2);
                // Gather every other reduced shard.
                for s in peers {
                    steps.push(Step::Expect(stage(rank, 1, s), sum));
                }
                seq += 2;
            }
        }
    }
    steps
}

fn initial(cell: &Cell) -> Value {
    match cell {
        Cell::Slot { .. } => Value::Armed,
        Cell::Stage { .. } => Value::Empty,
        Cell::Flag { .. } => Value::Counter(0),
    }
}

/// What the checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Violation {
    /// A read saw another value than the one its program expects: data of
    /// another call or use (a buffer reused too early, or not re-armed).
    WrongData {
        rank: usize,
        cell: Cell,
        got: Value,
        expected: Value,
    },
    /// No rank can move but some have not finished; `steps` is where each
    /// rank's program stands.
    Deadlock { steps: Vec<usize> },
    /// A Lamport write found its cell holding `held`, not armed: a cell not
    /// re-armed since its last use.
    Unarmed {
        rank: usize,
        cell: Cell,
        held: Value,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::WrongData {
                rank,
                cell,
                got,
                expected,
            } => write!(
                f,
                "rank {rank} read {got:?} from {cell:?}, expected {expected:?}"
            ),
            Violation::Deadlock { steps } => write!(f, "deadlock with ranks at steps {steps:?}"),
            Violation::Unarmed { rank, cell, held } => {
                write!(
                    f,
                    "rank {rank} pushed into {cell:?}, which held {held:?}, not armed"
                )
            }
        }
    }
}

/// Explores every interleaving (breadth first, so the violation reported is
/// one of the shortest); `Err` is the first violation found, else the number
/// of states seen.
fn check(programs: &[Program]) -> Result<usize, Violation> {
    let mut index: HashMap<Cell, usize> = HashMap::new();
    let mut cells: Vec<Cell> = Vec::new();
    for step in programs.iter().flatten() {
        let (Step::Write(c, _)
        | Step::Push(c, _)
        | Step::Consume(c, _)
        | Step::WaitFlag(c, _)
        | Step::Expect(c, _)) = step;
        index.entry(*c).or_insert_with(|| {
            cells.push(*c);
            cells.len() - 1
        });
    }
    let start: (Vec<usize>, Vec<Value>) =
        (vec![0; programs.len()], cells.iter().map(initial).collect());
    let mut seen = HashSet::new();
    let mut queue = VecDeque::new();
    seen.insert(start.clone());
    queue.push_back(start);
    while let Some((pcs, memory)) = queue.pop_front() {
        let mut moved = false;
        for (rank, program) in programs.iter().enumerate() {
            let Some(step) = program.get(pcs[rank]) else {
                continue;
            };
            let mut memory = memory.clone();
            match *step {
                Step::Write(cell, value) => memory[index[&cell]] = value,
                Step::Push(cell, value) => {
                    let held = memory[index[&cell]];
                    if held != Value::Armed {
                        return Err(Violation::Unarmed { rank, cell, held });
                    }
                    memory[index[&cell]] = value;
                }
                Step::Consume(cell, expect) => {
                    let got = memory[index[&cell]];
                    if got == Value::Armed {
                        continue;
                    }
                    if got != expect {
                        return Err(Violation::WrongData {
                            rank,
                            cell,
                            got,
                            expected: expect,
                        });
                    }
                }
                Step::WaitFlag(cell, target) => match memory[index[&cell]] {
                    Value::Counter(v) if flag_reached(v, target) => {}
                    _ => continue,
                },
                Step::Expect(cell, expect) => {
                    let got = memory[index[&cell]];
                    if got != expect {
                        return Err(Violation::WrongData {
                            rank,
                            cell,
                            got,
                            expected: expect,
                        });
                    }
                }
            }
            moved = true;
            let mut pcs = pcs.clone();
            pcs[rank] += 1;
            let next = (pcs, memory);
            if seen.insert(next.clone()) {
                queue.push_back(next);
            }
        }
        if !moved && pcs.iter().zip(programs).any(|(pc, p)| *pc < p.len()) {
            return Err(Violation::Deadlock { steps: pcs });
        }
    }
    Ok(seen.len())
}

#[test]
fn lamport_push_with_three_buffers_is_safe() {
    for world in [1, 2, 3] {
        let calls = if world == 3 { 4 } else { 6 };
        let programs: Vec<Program> = (0..world)
            .map(|r| push_program(r, world, calls, 3))
            .collect();
        let states = check(&programs).unwrap_or_else(|e| panic!("world {world}: {e}"));
        // A world of one pushes nothing (a rank reads its own input).
        assert!(world == 1 || states > calls as usize);
    }
}

#[test]
fn the_checker_reports_a_wait_nobody_satisfies_as_a_deadlock() {
    let flag = Cell::Flag {
        owner: 0,
        source: 1,
    };
    let waits = vec![Step::WaitFlag(flag, 1)];
    let finishes = vec![Step::Write(flag, Value::Counter(0))];
    assert_eq!(
        check(&[waits, finishes]),
        Err(Violation::Deadlock { steps: vec![0, 1] })
    );
}

#[test]
fn the_checker_reports_a_read_of_other_data() {
    let cell = Cell::Stage {
        owner: 0,
        half: 0,
        area: 0,
        slot: 0,
    };
    let early = Value::Data {
        id: 0,
        reduced: false,
    };
    let late = Value::Data {
        id: 1,
        reduced: false,
    };
    // Whichever write comes first, one of the two reads sees the other's data.
    let programs = [
        vec![Step::Write(cell, early), Step::Expect(cell, early)],
        vec![Step::Write(cell, late), Step::Expect(cell, late)],
    ];
    match check(&programs) {
        Err(Violation::WrongData { cell: at, .. }) => assert_eq!(at, cell),
        other => panic!("expected a read of other data, got {other:?}"),
    }
}

// With two push buffers a rank re-arms the buffer its peer is already
// writing the next call into: the data is erased and the peer's wait for it
// never ends.
#[test]
fn lamport_push_with_two_buffers_is_caught() {
    let programs: Vec<Program> = (0..2).map(|r| push_program(r, 2, 4, 2)).collect();
    assert_eq!(
        check(&programs),
        Err(Violation::Deadlock { steps: vec![7, 4] })
    );
}

#[test]
fn one_shot_pull_with_two_halves_is_safe() {
    for world in [2, 3] {
        let calls = [PullCall::OneShot; 4];
        let programs: Vec<Program> = (0..world)
            .map(|r| pull_program(r, world, &calls, 2))
            .collect();
        check(&programs).unwrap_or_else(|e| panic!("world {world}: {e}"));
    }
}

/// Rank `rank` read call 1's input from slot 0 of `owner`'s (only) staging
/// half, where call 0's belongs.
fn stale_input(rank: usize, owner: usize) -> Violation {
    let input = |id| Value::Data { id, reduced: false };
    Violation::WrongData {
        rank,
        cell: Cell::Stage {
            owner,
            half: 0,
            area: 0,
            slot: 0,
        },
        got: input(1),
        expected: input(0),
    }
}

#[test]
fn one_shot_pull_with_one_half_is_caught() {
    let calls = [PullCall::OneShot; 3];
    let programs: Vec<Program> = (0..2).map(|r| pull_program(r, 2, &calls, 1)).collect();
    // Rank 0 already staged its next call's input where rank 1 reads this one's.
    assert_eq!(check(&programs), Err(stale_input(1, 0)));
}

#[test]
fn two_shot_and_one_shot_share_counters_safely() {
    use PullCall::*;
    let calls = [TwoShot, OneShot, TwoShot, TwoShot, OneShot];
    let programs: Vec<Program> = (0..2).map(|r| pull_program(r, 2, &calls, 2)).collect();
    check(&programs).unwrap();
    let calls = [TwoShot, TwoShot, OneShot];
    let programs: Vec<Program> = (0..3).map(|r| pull_program(r, 3, &calls, 2)).collect();
    check(&programs).unwrap();
}

#[test]
fn two_shot_by_stores_with_up_to_four_ranks_is_safe() {
    use PullCall::*;
    for world in [2, 3, 4] {
        let calls: &[PullCall] = if world == 4 {
            &[TwoShot, TwoShot]
        } else {
            &[TwoShot, TwoShot, TwoShot]
        };
        let programs: Vec<Program> = (0..world)
            .map(|r| pull_program(r, world, calls, 2))
            .collect();
        check(&programs).unwrap_or_else(|e| panic!("world {world}: {e}"));
    }
}

#[test]
fn mixed_pull_family_with_one_half_is_caught() {
    use PullCall::*;
    let calls = [OneShot, TwoShot, OneShot];
    let programs: Vec<Program> = (0..2).map(|r| pull_program(r, 2, &calls, 1)).collect();
    // Rank 0's scatter of the two-shot call lands in the slot where rank 1
    // still reads the one-shot call's input.
    assert_eq!(check(&programs), Err(stale_input(1, 1)));
}

#[test]
fn mixed_push_calls_with_the_fused_two_shot_are_safe() {
    use PushCall::*;
    // The fused two-shot three calls after itself (the same buffer), after
    // and before each other push-family call, in worlds of 2 and 3.
    let sequences: [&[PushCall]; 4] = [
        &[
            FusedTwoShot,
            OneShot,
            TwoShot,
            FusedTwoShot,
            FusedTwoShot,
            OneShot,
            FusedTwoShot,
        ],
        &[
            TwoShot,
            FusedTwoShot,
            OneShot,
            OneShot,
            FusedTwoShot,
            TwoShot,
            TwoShot,
        ],
        &[OneShot, FusedTwoShot, FusedTwoShot, FusedTwoShot, OneShot],
        &[FusedTwoShot, OneShot, OneShot, TwoShot],
    ];
    for world in [1, 2, 3] {
        for calls in sequences {
            let calls = if world == 3 {
                &calls[..calls.len().min(5)]
            } else {
                calls
            };
            let programs: Vec<Program> = (0..world)
                .map(|r| push_calls_program(r, world, calls, None))
                .collect();
            check(&programs).unwrap_or_else(|e| panic!("world {world}, {calls:?}: {e}"));
        }
    }
}

#[test]
fn a_fused_two_shot_that_leaves_its_own_slot_unarmed_is_caught() {
    use PushCall::*;
    // Its next call through the same buffer, three calls later, finds the
    // old x in its own slot, where a poll (step 4 takes it on another thread
    // than step 3 writes it) could take it for the new one. (A world of one
    // has no own slot in use.)
    let calls = [FusedTwoShotNoRearm, OneShot, OneShot, FusedTwoShot];
    let programs: Vec<Program> = (0..2)
        .map(|r| push_calls_program(r, 2, &calls, None))
        .collect();
    match check(&programs) {
        Err(Violation::Unarmed {
            rank,
            cell:
                Cell::Slot {
                    owner,
                    slot,
                    part: 0,
                    ..
                },
            held: Value::Data {
                id: 0,
                reduced: true,
            },
        }) if owner == rank && slot == rank => {}
        other => panic!("expected the old x found in an own slot, got {other:?}"),
    }
}

#[test]
fn a_re_arm_short_of_what_the_previous_call_used_is_caught() {
    use PushCall::*;
    // Re-arming only part 0 after a two-shot call leaves its sums in part 1,
    // where the next two-shot call through that buffer pushes (or reads)
    // its own.
    let calls = [TwoShot, OneShot, OneShot, TwoShot];
    let programs: Vec<Program> = (0..2)
        .map(|r| push_calls_program(r, 2, &calls, Some(&[0])))
        .collect();
    let stale = Value::Data {
        id: 0,
        reduced: true,
    };
    match check(&programs) {
        Err(Violation::Unarmed {
            cell: Cell::Slot { part: 1, .. },
            held,
            ..
        }) if held == stale => {}
        Err(Violation::WrongData {
            cell: Cell::Slot { part: 1, .. },
            got,
            ..
        }) if got == stale => {}
        other => panic!("expected an old sum found in part 1, got {other:?}"),
    }
}
