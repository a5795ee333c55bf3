//! [`HostSimulation`]: hosts with their software on one simulated clock and network, run
//! step by step, with partitions, delays, crashes and restarts; and what a host's software can
//! ask of it (its seed, the simulated time, joining a cluster).

use super::*;

/// Settings of a [`HostSimulation`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::sim::HostSimulation;
///
/// let simulation = HostSimulation::builder(42)
///     .latency(Duration::from_millis(2), Duration::from_millis(20))
///     .tick(Duration::from_millis(1))
///     .build();
/// assert_eq!(simulation.seed(), 42);
/// ```
#[derive(Debug, Clone)]
pub struct SimBuilder {
    seed: u64,
    tick: Duration,
    min_latency: Duration,
    max_latency: Duration,
    max_duration: Duration,
}

impl SimBuilder {
    /// Link latency: each message takes between `min` and `max`, drawn from the seed
    /// (default 1–5 ms).
    pub fn latency(&mut self, min: Duration, max: Duration) -> &mut Self {
        self.min_latency = min;
        self.max_latency = max.max(min);
        self
    }

    /// The resolution of simulated time (default 1 ms).
    pub fn tick(&mut self, tick: Duration) -> &mut Self {
        self.tick = tick;
        self
    }

    /// The longest a simulation may run, in simulated time (default one hour).
    pub fn max_duration(&mut self, max: Duration) -> &mut Self {
        self.max_duration = max;
        self
    }

    /// The simulation, with no hosts yet.
    pub fn build(&self) -> HostSimulation {
        let sim = turmoil::Builder::new()
            .rng_seed(self.seed)
            .tick_duration(self.tick)
            .min_message_latency(self.min_latency)
            .max_message_latency(self.max_latency)
            .simulation_duration(self.max_duration)
            // A fixed start date: the simulated wall clock is part of the replay.
            .epoch(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
            .build();
        HostSimulation {
            sim,
            seed: self.seed,
            hosts: Vec::new(),
            latency: (self.min_latency, self.max_latency),
            connections: Arc::default(),
            random: None,
            faults: Vec::new(),
            rng: mix(self.seed, "random faults"),
        }
    }
}

/// Simulated hosts, each running a Rally node (or anything else on tokio), on one network
/// and one simulated clock. Nothing runs until [`run_for`](Self::run_for) or
/// [`run_until`](Self::run_until).
///
/// # Example
///
/// See [the module](super).
pub struct HostSimulation {
    sim: turmoil::Sim<'static>,
    seed: u64,
    hosts: Vec<String>,
    /// The links' latency bounds from the builder, restored after a random delay spike.
    latency: (Duration, Duration),
    connections: Arc<Connections>,
    random: Option<Random>,
    faults: Vec<Logged<Fault>>,
    /// The random faults' generator (SplitMix64), seeded from the simulation's seed.
    rng: u64,
}

impl std::fmt::Debug for HostSimulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSimulation")
            .field("seed", &self.seed)
            .field("hosts", &self.hosts)
            .field("elapsed", &self.sim.elapsed())
            .finish()
    }
}

impl HostSimulation {
    /// A simulation with the default settings, its random choices drawn from `seed`.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(rally::sim::HostSimulation::new(3).seed(), 3);
    /// ```
    pub fn new(seed: u64) -> Self {
        Self::builder(seed).build()
    }

    /// Settings for a simulation seeded with `seed`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let simulation = rally::sim::HostSimulation::builder(3).max_duration(Duration::from_secs(60)).build();
    /// ```
    pub fn builder(seed: u64) -> SimBuilder {
        SimBuilder {
            seed,
            tick: DEFAULT_TICK,
            min_latency: DEFAULT_MIN_LATENCY,
            max_latency: DEFAULT_MAX_LATENCY,
            max_duration: DEFAULT_MAX_DURATION,
        }
    }

    /// The seed this simulation draws from.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(rally::sim::HostSimulation::new(9).seed(), 9);
    /// ```
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds host `name` running `software`, which starts at the next step. The value the
    /// software's future returns (the actor system, node, cluster, refs…) is kept until the
    /// host crashes; [`restart`](Self::restart) calls `software` again, as a process restart
    /// runs `main` again.
    ///
    /// The software runs on the host's own single-thread runtime: spawn with `tokio::spawn`
    /// or `tokio::task::spawn_local`; its timers run on simulated time.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::ActorSystem;
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async { ActorSystem::new("demo") });
    /// ```
    pub fn host<F, Fut, T>(&mut self, name: &str, software: F)
    where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = T> + 'static,
        T: 'static,
    {
        self.hosts.push(name.to_owned());
        let base = mix(self.seed, name);
        let lives = std::cell::Cell::new(0u64);
        self.sim.host(name, move || {
            // Each life of the host (each restart) draws from its own seed.
            let seed = mix(base, &lives.replace(lives.get() + 1).to_string());
            let started = HOST_SEED.scope(seed, software());
            async move {
                let _kept = started.await;
                std::future::pending::<()>().await;
                Ok(())
            }
        });
    }

    /// Simulated time since the start.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.run_for(Duration::from_millis(20)).unwrap();
    /// assert!(simulation.elapsed() >= Duration::from_millis(20));
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.sim.elapsed()
    }

    /// Runs every host for `duration` of simulated time.
    ///
    /// # Errors
    ///
    /// [`SimError::Failed`] if a host's software failed or the simulation ran past its
    /// maximum duration.
    ///
    /// # Example
    ///
    /// See [the module](super).
    pub fn run_for(&mut self, duration: Duration) -> Result<(), SimError> {
        let until = self.sim.elapsed() + duration;
        while self.sim.elapsed() < until {
            self.step()?;
        }
        Ok(())
    }

    /// Runs until `done` returns true (checked after every step); returns the simulated time
    /// that took.
    ///
    /// # Errors
    ///
    /// [`SimError::Timeout`] if `done` is still false after `limit`; [`SimError::Failed`] as
    /// [`run_for`](Self::run_for).
    ///
    /// # Example
    ///
    /// See [the module](super).
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut() -> bool,
    ) -> Result<Duration, SimError> {
        let start = self.sim.elapsed();
        while !done() {
            if self.sim.elapsed() - start >= limit {
                return Err(SimError::Timeout(limit));
            }
            self.step()?;
        }
        Ok(self.sim.elapsed() - start)
    }

    pub(super) fn step(&mut self) -> Result<(), SimError> {
        self.throw_random_faults();
        let previous = CONNECTIONS.with(|c| c.replace(Some(Arc::clone(&self.connections))));
        let stepped = self.sim.step();
        CONNECTIONS.with(|c| c.replace(previous));
        stepped
            .map(drop)
            .map_err(|e| SimError::Failed(e.to_string()))
    }

    /// Breaks every open connection between a host of `a` and a host of `b`, as a lost TCP
    /// connection breaks: both ends get an I/O error at once (what was in flight is lost), and
    /// the software reconnects if it wants to (Rally's remoting does, and re-sends nothing).
    /// Returns how many connections broke. New connections between them work at once.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::sim::{Fault, HostSimulation, SimTransport};
    /// use rally::remote::transport::Transport;
    ///
    /// let mut simulation = HostSimulation::new(1);
    /// simulation.host("server", || async {
    ///     let mut listener = SimTransport.bind("server", 2552).await.unwrap();
    ///     let (incoming, _) = listener.accept().await.unwrap();
    ///     let stream = incoming.await.unwrap();
    ///     (listener, stream)
    /// });
    /// simulation.host("client", || async { SimTransport.connect("server", 2552).await.unwrap() });
    /// simulation.run_for(Duration::from_millis(50)).unwrap();
    /// assert_eq!(simulation.drop_connections(&["client"], &["server"]).unwrap(), 1);
    /// assert!(matches!(simulation.faults()[0].entry, Fault::Broke { connections: 1, .. }));
    /// ```
    pub fn drop_connections(&mut self, a: &[&str], b: &[&str]) -> Result<usize, SimError> {
        for name in a.iter().chain(b) {
            self.known(name)?;
        }
        let mut broken = 0;
        for x in a {
            for y in b {
                if x != y {
                    broken += self.break_link(x, y);
                }
            }
        }
        Ok(broken)
    }

    pub(super) fn break_link(&mut self, a: &str, b: &str) -> usize {
        let connections = self
            .connections
            .break_between(self.sim.lookup(a), self.sim.lookup(b));
        self.faults.push(Logged {
            at: self.sim.elapsed(),
            entry: Fault::Broke {
                a: a.to_owned(),
                b: b.to_owned(),
                connections,
            },
        });
        connections
    }

    /// Turns on faults drawn from the seed (see [`RandomFaults`]), from the next step on,
    /// until [`stop_random_faults`](Self::stop_random_faults). The same seed throws the same
    /// faults at the same instants; [`faults`](Self::faults) lists them.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidFaults`] for a zero interval or a probability outside 0–1 (nothing
    /// changes).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::sim::{RandomFaults, HostSimulation};
    ///
    /// let mut simulation = HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.host("b", || async {});
    /// let faults = RandomFaults::every(Duration::from_millis(100)).delay_spikes(0.5, Duration::from_millis(50));
    /// simulation.start_random_faults(faults).unwrap();
    /// simulation.run_for(Duration::from_secs(2)).unwrap();
    /// simulation.stop_random_faults();
    /// assert!(!simulation.faults().is_empty());
    /// assert!(simulation.start_random_faults(RandomFaults::every(Duration::ZERO)).is_err());
    /// ```
    pub fn start_random_faults(&mut self, faults: RandomFaults) -> Result<(), SimError> {
        faults.validate()?;
        self.stop_random_faults();
        self.random = Some(Random {
            faults,
            next_at: self.sim.elapsed(),
            spiked: Vec::new(),
        });
        Ok(())
    }

    /// Turns random faults off; links slowed down by a spike get their usual latency back.
    ///
    /// # Example
    ///
    /// See [`start_random_faults`](Self::start_random_faults).
    pub fn stop_random_faults(&mut self) {
        if let Some(random) = self.random.take() {
            self.restore(&random.spiked);
        }
    }

    /// Every fault the simulation caused so far ([`drop_connections`](Self::drop_connections)
    /// and random faults), stamped with simulated time.
    ///
    /// # Example
    ///
    /// See [`drop_connections`](Self::drop_connections).
    pub fn faults(&self) -> &[Logged<Fault>] {
        &self.faults
    }

    pub(super) fn restore(&self, links: &[(String, String)]) {
        let (min, max) = self.latency;
        for (a, b) in links {
            self.sim.set_link_latency(a.as_str(), b.as_str(), min);
            self.sim
                .set_link_max_message_latency(a.as_str(), b.as_str(), max);
        }
    }

    /// A number in 0–1 from the random faults' generator (SplitMix64).
    pub(super) fn draw(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(super) fn throw_random_faults(&mut self) {
        let now = self.sim.elapsed();
        let Some(random) = &mut self.random else {
            return;
        };
        if now < random.next_at {
            return;
        }
        random.next_at = now + random.faults.interval;
        let faults = random.faults.clone();
        let spiked = std::mem::take(&mut random.spiked);
        self.restore(&spiked);
        let hosts = self.hosts.clone();
        let mut spikes = Vec::new();
        for (i, a) in hosts.iter().enumerate() {
            for b in &hosts[i + 1..] {
                if self.draw() < faults.break_probability {
                    self.break_link(a, b);
                }
                if self.draw() < faults.spike_probability {
                    self.sim
                        .set_link_latency(a.as_str(), b.as_str(), faults.spike);
                    self.faults.push(Logged {
                        at: now,
                        entry: Fault::Spike {
                            a: a.clone(),
                            b: b.clone(),
                            latency: faults.spike,
                        },
                    });
                    spikes.push((a.clone(), b.clone()));
                }
            }
        }
        if let Some(random) = &mut self.random {
            random.spiked = spikes;
        }
    }

    /// Cuts every link between a host of `a` and a host of `b`, both ways, as a firewall that
    /// drops packets would: connections stay open, nothing gets through, and what was sent
    /// arrives after [`heal`](Self::heal), as TCP's retransmissions would deliver it.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// for name in ["a", "b", "c"] {
    ///     simulation.host(name, || async {});
    /// }
    /// simulation.partition(&["a"], &["b", "c"]).unwrap();
    /// simulation.heal(&["a"], &["b", "c"]).unwrap();
    /// assert!(simulation.partition(&["a"], &["x"]).is_err());
    /// ```
    pub fn partition(&mut self, a: &[&str], b: &[&str]) -> Result<(), SimError> {
        self.pairs(a, b, |sim, a, b| sim.hold(a, b))
    }

    /// Heals what [`partition`](Self::partition) cut between `a` and `b`: held messages
    /// are delivered.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// See [`partition`](Self::partition).
    pub fn heal(&mut self, a: &[&str], b: &[&str]) -> Result<(), SimError> {
        self.pairs(a, b, |sim, a, b| sim.release(a, b))
    }

    /// Sets the latency of every link between `a` and `b` to exactly `latency`.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.host("b", || async {});
    /// simulation.delay(&["a"], &["b"], Duration::from_millis(300)).unwrap();
    /// ```
    pub fn delay(&mut self, a: &[&str], b: &[&str], latency: Duration) -> Result<(), SimError> {
        self.pairs(a, b, |sim, a, b| sim.set_link_latency(a, b, latency))
    }

    /// Crashes host `name`: its software and every task it spawned stop at once, its
    /// connections break, nothing runs there until [`restart`](Self::restart).
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// ```
    /// let mut simulation = rally::sim::HostSimulation::new(1);
    /// simulation.host("a", || async {});
    /// simulation.crash("a").unwrap();
    /// simulation.restart("a").unwrap();
    /// ```
    pub fn crash(&mut self, name: &str) -> Result<(), SimError> {
        self.known(name)?;
        self.sim.crash(name);
        Ok(())
    }

    /// Starts host `name`'s software again (a fresh process: a new actor system and node,
    /// so a new incarnation), after a [`crash`](Self::crash) or in place of a running one.
    ///
    /// # Errors
    ///
    /// [`SimError::UnknownHost`] for a name no [`host`](Self::host) call added.
    ///
    /// # Example
    ///
    /// See [`crash`](Self::crash).
    pub fn restart(&mut self, name: &str) -> Result<(), SimError> {
        self.known(name)?;
        self.sim.bounce(name);
        Ok(())
    }

    pub(super) fn known(&self, name: &str) -> Result<(), SimError> {
        if self.hosts.iter().any(|h| h == name) {
            Ok(())
        } else {
            Err(SimError::UnknownHost(name.to_owned()))
        }
    }

    pub(super) fn pairs(
        &mut self,
        a: &[&str],
        b: &[&str],
        mut each: impl FnMut(&turmoil::Sim<'static>, &str, &str),
    ) -> Result<(), SimError> {
        for name in a.iter().chain(b) {
            self.known(name)?;
        }
        for x in a {
            for y in b {
                if x != y {
                    each(&self.sim, x, y);
                }
            }
        }
        Ok(())
    }
}

tokio::task_local! {
    /// The seed of the host's current life, while its software's main future runs.
    pub(super) static HOST_SEED: u64;
}

/// Mixes `text` into `seed` (FNV-1a over the text, then SplitMix64's finalizer): distinct
/// hosts and lives get unrelated seeds.
pub(super) fn mix(seed: u64, text: &str) -> u64 {
    let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A seed for the random choices of this life of this host, derived from the simulation's
/// seed, the host's name and how many times it started: for anything in the host's software
/// that draws random numbers and must replay. `None` outside a host's software future (in a
/// task it spawned, for example: read it first and pass it on).
///
/// # Example
///
/// ```
/// use rally::sim::{self, SimLog, HostSimulation};
///
/// let log = SimLog::new();
/// let mut simulation = HostSimulation::new(5);
/// let on_host = log.clone();
/// simulation.host("a", move || {
///     let log = on_host.clone();
///     async move { log.record(sim::host_seed()) }
/// });
/// simulation.run_for(std::time::Duration::from_millis(5)).unwrap();
/// assert!(log.entries()[0].entry.is_some());
/// assert_eq!(sim::host_seed(), None);
/// ```
pub fn host_seed() -> Option<u64> {
    HOST_SEED.try_with(|seed| *seed).ok()
}

/// Joins the cluster as [`Cluster::join`] does (gossip over `node`), with the membership
/// protocol's random choices drawn from [`host_seed`] and the member's generation (its age,
/// which decides the oldest member) from the simulated clock, so that a seed replays the run.
///
/// # Errors
///
/// As [`Cluster::join`].
///
/// # Panics
///
/// Outside a [`HostSimulation`]'s host software future (there is no host seed there).
///
/// # Example
///
/// See [the module](super).
pub fn join(
    system: &ActorSystem,
    node: &RemoteNode,
    config: ClusterConfig,
) -> Result<Cluster, JoinError> {
    let seed = host_seed().expect("sim::join runs in a simulated host's software future");
    let provider = GossipProvider::new(system, node).with_seed(seed);
    let mut local = Cluster::member_id(node).declaring(&config);
    local.generation = generation();
    // A simulated host is not a process of its own: a downed member stops, the simulation
    // goes on.
    let mut config = config;
    config.when_downed = rally_cluster::WhenDowned::Stop;
    Cluster::join_as(system, local, config, provider)
}

/// A member's generation (its age) under the simulation: milliseconds since the Unix epoch
/// on the simulated wall clock (a fixed start date plus simulated time), so that who is the
/// oldest member replays with the seed. Production takes the real wall clock
/// ([`Cluster::member_id`]).
pub(super) fn generation() -> u64 {
    let since_epoch = turmoil::since_epoch().expect("inside a simulated host");
    u64::try_from(since_epoch.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// The simulated time now, inside a [`HostSimulation`]'s host; `None` outside one.
///
/// # Example
///
/// ```
/// assert_eq!(rally::sim::now(), None);
/// ```
pub fn now() -> Option<Duration> {
    turmoil::sim_elapsed()
}
