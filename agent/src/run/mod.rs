//! The one place that orders the steps of a run.
