//! The simulator on issue 28's large trace: 188,041 jobs by 216 users on 2,000 cores,
//! the one BENCHMARKS.md times (`fairshare trace --shape zipf --jobs 188041 --users 216
//! --cores 2000 --seed 28`, generated here in memory, at its offered load 0.9 and at
//! 1.2), one whole [`simulate`] per sample, per policy, with the default settings.
//! Trace reading and the report are left out (the whole command is timed in
//! BENCHMARKS.md).
//!
//!     cargo bench --bench simulate

use divan::Bencher;
use fairshare::sim::swf::TraceJob;
use fairshare::sim::synth::{generate, Shape, SynthSpec};
use fairshare::sim::{simulate, SimConfig, SimPolicy};

/// Cores of the simulated cluster (the trace's `MaxProcs`).
const CORES: u32 = 2000;

fn main() {
    divan::main();
}

fn trace(load: f64) -> Vec<TraceJob> {
    let spec = SynthSpec {
        load,
        ..SynthSpec::new(Shape::Zipf, 188_041, 216, CORES, 28)
    };
    generate(&spec).expect("a valid spec").jobs
}

/// Offered load 0.9: the trace of BENCHMARKS.md.
#[divan::bench(args = [SimPolicy::FairShare, SimPolicy::Fifo], sample_count = 5, sample_size = 1)]
fn load_0_9(bencher: Bencher, policy: SimPolicy) {
    let jobs = trace(0.9);
    let config = SimConfig::new(policy, CORES);
    bencher.bench(|| simulate(&jobs, &config));
}

/// Offered load 1.2: queues grow for the whole run.
#[divan::bench(args = [SimPolicy::FairShare, SimPolicy::Fifo], sample_count = 3, sample_size = 1)]
fn load_1_2(bencher: Bencher, policy: SimPolicy) {
    let jobs = trace(1.2);
    let config = SimConfig::new(policy, CORES);
    bencher.bench(|| simulate(&jobs, &config));
}
