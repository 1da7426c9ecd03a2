//! The notes `kiln plan` shows: what each rule of the dispatch said about one problem, built only
//! when collecting, so that a launch formats nothing.

/// What the dispatch's rules say about one problem, for `kiln plan`: each note is built only when
/// collecting ([`Notes::on`]), so the launch path, which passes [`Notes::off`], formats nothing.
#[derive(Debug, Default)]
pub struct Notes(Option<Vec<String>>);

impl Notes {
    pub fn on() -> Notes {
        Notes(Some(Vec::new()))
    }

    pub fn off() -> Notes {
        Notes(None)
    }

    /// Adds the note `f` makes, when collecting.
    pub fn add(&mut self, f: impl FnOnce() -> String) {
        if let Some(v) = self.0.as_mut() {
            v.push(f());
        }
    }

    /// The notes collected, in order (none when off).
    pub fn into_vec(self) -> Vec<String> {
        self.0.unwrap_or_default()
    }
}
