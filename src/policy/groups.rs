//! Groups: a tree of users' organisations (`ibm-q/open/main`), fair share shared
//! down it (DESIGN §2, "Groups").
//!
//! **Hierarchical DRF** (Bhattacharya et al., "Hierarchical scheduling for diverse
//! datacenter workloads", SoCC 2013): at each level, among the children with a head
//! to serve, the one with the smallest weighted key goes first, down to a user and
//! its head job. A group's key is `(s_g + h_g) / w_g`: `s_g` the dominant share of
//! the sum of its users' allocations (the paper's rule: the dominant share of what
//! the subtree holds, not the sum of its users' dominant shares), `h_g` the sum of
//! its users' decayed usage (Slurm rolls usage up the tree the same way), `w_g` its
//! weight. A user's key is unchanged (`(s_u + h_u) / w_u − g_u`, the age term only
//! at the user's level). Where the paper and Slurm's Fair Tree differ, this follows
//! the paper: keys are recomputed after every grant within a cycle (Fair Tree ranks
//! users once per priority calculation), so one cycle shares capacity among groups
//! by weight as it does among users.
//!
//! Order is lexicographic over the path from the root: each level's entry is
//! `(quantized key, tie-break, id)`; siblings that tie go in group-path order, a
//! group before a user, users by their oldest head then name. A user outside every
//! group sits in the root beside the top-level groups, and with no groups at all
//! the order is exactly the flat one.
//!
//! A group's `paused`, `max_running_jobs` and `max_resources` apply to everything
//! under it: a user is eligible only if every group on its path is. A group's
//! totals, hence its key and its limits, count every user under it, those with
//! nothing queued too (issue 43 §1).

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{dominant_share, quantize_key, Resources};

/// Most levels of groups above a user.
pub const MAX_DEPTH: usize = 8;

/// Longest segment of a group path, characters.
pub const MAX_SEGMENT_LEN: usize = 64;

/// A group as the policy sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupView {
    /// Its path from the root, segments joined by `/` (e.g. `ibm-q/open/main`); its
    /// parent is the path without the last segment (which must be a group too).
    pub path: String,
    /// Weight `w_g > 0` (default 1) among its siblings.
    pub weight: f64,
    /// Paused: nothing new is granted to any user under it.
    pub paused: bool,
    /// Cap on the outstanding jobs of all users under it (`u32::MAX`: none).
    pub max_running_jobs: u32,
    /// Cap on the sum of their allocations, cores, GPUs and bytes (custom
    /// resources not capped), if any.
    pub max_resources: Option<Resources>,
}

impl GroupView {
    /// A group with weight 1, running, no limits.
    #[must_use]
    pub fn new(path: &str) -> GroupView {
        GroupView {
            path: path.to_owned(),
            weight: 1.0,
            paused: false,
            max_running_jobs: u32::MAX,
            max_resources: None,
        }
    }
}

/// Why a group path is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathError {
    /// Empty, an empty segment, a segment longer than [`MAX_SEGMENT_LEN`] or with
    /// a character outside `[A-Za-z0-9_.-]`.
    Invalid(String),
    /// More than [`MAX_DEPTH`] segments.
    TooDeep(String),
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::Invalid(p) => write!(
                f,
                "{p:?} is not a group path: segments of 1 to {MAX_SEGMENT_LEN} characters \
                 [A-Za-z0-9_.-] joined by '/'"
            ),
            PathError::TooDeep(p) => {
                write!(f, "{p:?} is deeper than {MAX_DEPTH} levels")
            }
        }
    }
}

impl std::error::Error for PathError {}

/// Checks a group path (`ibm-q/open/main`).
///
/// # Errors
/// [`PathError`] says what is wrong.
pub fn check_path(path: &str) -> Result<(), PathError> {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= MAX_SEGMENT_LEN
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    };
    if !path.split('/').all(ok) {
        return Err(PathError::Invalid(path.to_owned()));
    }
    if path.split('/').count() > MAX_DEPTH {
        return Err(PathError::TooDeep(path.to_owned()));
    }
    Ok(())
}

/// The parent path of `path` (`None` for a top-level group).
#[must_use]
pub fn parent(path: &str) -> Option<&str> {
    path.rsplit_once('/').map(|(p, _)| p)
}

/// The tree of groups: each group's parent and its place in path order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tree {
    /// Sorted by path (a parent before its children).
    groups: Vec<GroupView>,
    /// Parent index of each group.
    parents: Vec<Option<usize>>,
    by_path: HashMap<String, usize>,
}

impl Tree {
    /// The tree of `groups`. A group whose parent is missing, or whose path is
    /// invalid, is left out (the service refuses both before they get here); a
    /// path given twice keeps the last.
    #[must_use]
    pub fn new(groups: &[GroupView]) -> Tree {
        let mut by: std::collections::BTreeMap<&str, &GroupView> =
            std::collections::BTreeMap::new();
        for g in groups {
            if check_path(&g.path).is_ok() {
                by.insert(&g.path, g);
            }
        }
        let mut tree = Tree::default();
        for (path, g) in by {
            let parent = match parent(path) {
                None => None,
                Some(p) => match tree.by_path.get(p) {
                    Some(&i) => Some(i),
                    None => continue,
                },
            };
            tree.by_path.insert(path.to_owned(), tree.groups.len());
            tree.parents.push(parent);
            tree.groups.push(g.clone());
        }
        tree
    }

    /// No groups: every user is in the root.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The groups in path order.
    #[must_use]
    pub fn groups(&self) -> &[GroupView] {
        &self.groups
    }

    /// Number of groups.
    #[must_use]
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// The index of the group at `path`.
    #[must_use]
    pub fn index(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    /// The `max_resources` of the group at `path` and of each group above it, nearest
    /// first, with their paths (none: `None`, a path not in the tree, or no caps).
    pub fn caps_of<'a>(
        &'a self,
        path: Option<&str>,
    ) -> impl Iterator<Item = (&'a str, &'a super::Resources)> + 'a {
        let mut at = path.and_then(|p| self.index(p));
        std::iter::from_fn(move || {
            let i = at?;
            at = self.parents[i];
            Some(i)
        })
        .filter_map(|i| {
            let g = &self.groups[i];
            g.max_resources.as_ref().map(|m| (g.path.as_str(), m))
        })
    }

    /// The indexes from the top-level group down to the group at `path` (empty:
    /// `None`, or a path not in the tree, i.e. the root).
    #[must_use]
    pub fn path_of(&self, path: Option<&str>) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = path.and_then(|p| self.index(p));
        while let Some(i) = at {
            out.push(i);
            at = self.parents[i];
        }
        out.reverse();
        out
    }
}

/// What a group holds during a cycle: the sums over every user under it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct GroupTotals {
    /// Sum of the users' allocations.
    pub allocation: Resources,
    /// Sum of their outstanding jobs.
    pub outstanding: u32,
    /// Sum of their decayed usage at the cycle's `now`.
    pub usage: f64,
}

/// What each group of `tree` holds: every member's allocation, outstanding jobs and
/// decayed usage added to each group on its path (`members`: path, allocation,
/// outstanding, usage).
pub(crate) fn roll_up<'p>(
    tree: &Tree,
    members: impl IntoIterator<Item = (&'p [usize], Resources, u32, f64)>,
) -> Vec<GroupTotals> {
    let mut totals = vec![GroupTotals::default(); tree.len()];
    for (path, allocation, outstanding, usage) in members {
        for &g in path {
            let t = &mut totals[g];
            t.allocation += allocation;
            t.outstanding = t.outstanding.saturating_add(outstanding);
            t.usage += usage;
        }
    }
    totals
}

impl GroupTotals {
    /// The group's key `(s_g + h_g) / w_g`, quantized.
    pub(crate) fn key(&self, weight: f64, capacity: &Resources) -> f64 {
        quantize_key(super::fair_share_key(
            dominant_share(&self.allocation, capacity),
            self.usage,
            weight,
        ))
    }
}

/// Why a group on a user's path keeps it from starting `head`, if one does: the
/// first such group from the top.
pub(crate) fn ineligibility(
    tree: &Tree,
    totals: &[GroupTotals],
    path: &[usize],
    head: &Resources,
) -> Option<super::PendingReason> {
    for &g in path {
        let group = &tree.groups[g];
        let t = &totals[g];
        if group.paused {
            return Some(super::PendingReason::GroupPaused {
                group: group.path.clone(),
            });
        }
        if t.outstanding >= group.max_running_jobs {
            return Some(super::PendingReason::GroupMaxRunningJobs {
                group: group.path.clone(),
                limit: group.max_running_jobs,
            });
        }
        if let Some(max) = &group.max_resources {
            if !(t.allocation + *head).fits_cap(max) {
                return Some(super::PendingReason::GroupMaxResources {
                    group: group.path.clone(),
                });
            }
        }
    }
    None
}

/// One level of a user's place in hierarchical order: the key of the group (or
/// user) at that level, then the tie-break, then its id. Groups tie-break at
/// `−∞` (before users), users by their head's submit time.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Level {
    pub key: f64,
    pub tie: f64,
    pub id: usize,
}

impl Level {
    fn cmp(&self, other: &Level) -> std::cmp::Ordering {
        super::share::cmp_f64(self.key, other.key)
            .then_with(|| super::share::cmp_f64(self.tie, other.tie))
            .then_with(|| self.id.cmp(&other.id))
    }
}

/// A user's place in hierarchical order: one [`Level`] per group on its path,
/// then its own. Compared level by level (siblings differ at the first level
/// where their entries differ).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    levels: [Level; MAX_DEPTH + 1],
    len: u8,
}

impl Path {
    /// The path of a user with key `key`, oldest head `head_at` and index `user`
    /// under the groups `groups` (top first), their totals `totals`.
    pub(crate) fn new(
        tree: &Tree,
        totals: &[GroupTotals],
        capacity: &Resources,
        groups: &[usize],
        user: (f64, f64, usize),
    ) -> Path {
        let mut levels = [Level::default(); MAX_DEPTH + 1];
        let mut len = 0;
        for &g in groups.iter().take(MAX_DEPTH) {
            levels[len] = Level {
                key: totals[g].key(tree.groups[g].weight, capacity),
                tie: f64::NEG_INFINITY,
                id: g,
            };
            len += 1;
        }
        levels[len] = Level {
            key: user.0,
            tie: user.1,
            id: user.2,
        };
        Path {
            levels,
            len: u8::try_from(len + 1).unwrap_or(u8::MAX),
        }
    }

    /// The user's index (its own level's id).
    pub(crate) fn user(&self) -> usize {
        self.levels[usize::from(self.len) - 1].id
    }
}

impl Ord for Path {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let n = usize::from(self.len.min(other.len));
        for i in 0..n {
            let (a, b) = (&self.levels[i], &other.levels[i]);
            // A group entry against a user entry at the same level: different
            // siblings, decided here; the same group: go down.
            let o = a.cmp(b);
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        self.len.cmp(&other.len)
    }
}

impl PartialOrd for Path {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Path {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Path {}

/// Hierarchical fair shares: `capacity` (1) split among the root's children with
/// demand by weight, each group's part split among its children the same way
/// (water-filling: a child never gets more than its demand, what it leaves goes
/// to its siblings), down to users. `users` are `(group path indexes, weight,
/// demand)`; returns each user's fair share, a fraction of capacity. With no
/// groups this is [`super::fair_shares`] over the users.
#[must_use]
pub(crate) fn fair_shares(tree: &Tree, users: &[(Vec<usize>, f64, f64)]) -> Vec<f64> {
    let mut out = vec![0.0; users.len()];
    // Children of a node (None = root): groups and users, by index.
    #[derive(Clone, Copy)]
    enum Node {
        Group(usize),
        User(usize),
    }
    let mut children: HashMap<Option<usize>, Vec<Node>> = HashMap::new();
    for (i, _) in tree.groups.iter().enumerate() {
        children
            .entry(tree.parents[i])
            .or_default()
            .push(Node::Group(i));
    }
    for (u, (path, _, _)) in users.iter().enumerate() {
        children
            .entry(path.last().copied())
            .or_default()
            .push(Node::User(u));
    }
    // Demand of each group: the sum of its users' demands, capped at 1.
    let mut demand = vec![0.0; tree.groups.len()];
    for (path, _, d) in users {
        for &g in path {
            demand[g] += d;
        }
    }
    let node_demand = |n: &Node| match *n {
        Node::Group(g) => demand[g].min(1.0),
        Node::User(u) => users[u].2.min(1.0),
    };
    let node_weight = |n: &Node| match *n {
        Node::Group(g) => tree.groups[g].weight,
        Node::User(u) => users[u].1,
    };
    let mut stack: Vec<(Option<usize>, f64)> = vec![(None, 1.0)];
    while let Some((node, amount)) = stack.pop() {
        let Some(kids) = children.get(&node) else {
            continue;
        };
        // Water-fill `amount`: the same split as the flat one, scaled.
        let weights: Vec<f64> = kids.iter().map(node_weight).collect();
        let demands: Vec<f64> = kids
            .iter()
            .map(|k| {
                if amount > 0.0 {
                    node_demand(k) / amount
                } else {
                    0.0
                }
            })
            .collect();
        let mut parts = Vec::new();
        super::fair_shares(&weights, &demands, &mut parts);
        for (k, part) in kids.iter().zip(parts) {
            let part = part * amount;
            match *k {
                Node::Group(g) => stack.push((Some(g), part)),
                Node::User(u) => out[u] = part,
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        assert!(check_path("ibm-q/open/main").is_ok());
        assert!(check_path("a").is_ok());
        for bad in ["", "/a", "a/", "a//b", "a b", "a/ü", &"x".repeat(65)] {
            assert!(
                matches!(check_path(bad), Err(PathError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert!(check_path(&["a"; 8].join("/")).is_ok());
        assert!(matches!(
            check_path(&["a"; 9].join("/")),
            Err(PathError::TooDeep(_))
        ));
    }

    #[test]
    fn a_tree_keeps_groups_with_parents_and_resolves_paths() {
        let tree = Tree::new(&[
            GroupView::new("ibm-q/open"),
            GroupView::new("ibm-q"),
            GroupView::new("orphan/child"),
            GroupView::new("ibm-q/open/main"),
        ]);
        let paths: Vec<&str> = tree.groups().iter().map(|g| g.path.as_str()).collect();
        assert_eq!(paths, ["ibm-q", "ibm-q/open", "ibm-q/open/main"]);
        assert_eq!(tree.path_of(Some("ibm-q/open/main")), vec![0, 1, 2]);
        assert_eq!(tree.path_of(Some("nowhere")), Vec::<usize>::new());
        assert_eq!(tree.path_of(None), Vec::<usize>::new());
    }

    /// Groups 1:3 with two users each: the fair shares are 1/8, 1/8, 3/8, 3/8; a
    /// user with little demand leaves the rest to its sibling, not to the other
    /// group.
    #[test]
    fn fair_shares_split_down_the_tree() {
        let mut b = GroupView::new("b");
        b.weight = 3.0;
        let tree = Tree::new(&[GroupView::new("a"), b]);
        let users = vec![
            (vec![0], 1.0, 1.0),
            (vec![0], 1.0, 1.0),
            (vec![1], 1.0, 1.0),
            (vec![1], 1.0, 1.0),
        ];
        assert_eq!(fair_shares(&tree, &users), vec![0.125, 0.125, 0.375, 0.375]);
        let users = vec![
            (vec![0], 1.0, 0.05),
            (vec![0], 1.0, 1.0),
            (vec![1], 1.0, 1.0),
            (vec![1], 1.0, 1.0),
        ];
        let shares = fair_shares(&tree, &users);
        assert!((shares[0] - 0.05).abs() < 1e-12);
        assert!((shares[1] - 0.20).abs() < 1e-12);
        assert_eq!(&shares[2..], &[0.375, 0.375]);
    }
}
