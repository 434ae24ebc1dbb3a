//! One formatter for an error's cause chain, used wherever an error is logged, stored
//! as a job's message, or printed by the command line.

/// The error and all its sources, joined with `": "`; a layer that repeats its
/// source's text is said once. For logs, stored messages and CLI output.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_chain_names_every_cause_once() {
        let inner = std::io::Error::other("disk full");
        let outer = anyhow::Error::new(inner).context("cannot save");
        assert_eq!(super::chain(outer.as_ref()), "cannot save: disk full");
    }
}
