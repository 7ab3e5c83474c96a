//! Chaos on the three-node test cluster (`BULWARK_NODE_COUNT=3`): members on three nodes, the
//! operator on node 1 (beside the control plane), a writer recording every acknowledged row,
//! and faults made for real: a whole node lost (its link down, every process of it killed,
//! `tests/node/node.sh node stop`) or drained, the network split between nodes or pods
//! (`node.sh cut`), the primary's server crash-looping while a replica's node is down, a
//! replica's volume lost while the primary's node is down, the primary's agent hung while the
//! primary is cut off, or the operator's process killed in the middle of a switchover, a
//! failover, a rolling restart or a backup (the operator is shared: nothing else may run beside
//! these cases). Each case ends with every acknowledged row on the final primary and never two
//! writable members at a sampled moment, or with the documented refusal, and prints its write
//! unavailability, time to promotion and rows. The cases run one after the other (they share
//! the nodes).

// The crate root's modules are looked for beside it (`tests/`), where every file is a test
// binary of its own: these live in `tests/chaos/`.
#[path = "chaos/cluster.rs"]
mod cluster;
#[path = "chaos/crashes.rs"]
mod crashes;
#[path = "chaos/cuts.rs"]
mod cuts;
#[path = "chaos/hung_agent.rs"]
mod hung_agent;
#[path = "chaos/nodes.rs"]
mod nodes;
#[path = "chaos/operator.rs"]
mod operator;
#[path = "chaos/operator_work.rs"]
mod operator_work;
#[path = "chaos/reseeds.rs"]
mod reseeds;
