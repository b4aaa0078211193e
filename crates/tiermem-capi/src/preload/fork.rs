//! fork without exec: placeholder until the child pager lands.

pub fn install() {}
