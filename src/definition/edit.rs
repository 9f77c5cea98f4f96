//! Setting `spec.image` on a source definition, as Fundament's own publishing tool does:
//! an image-free `definition.yaml` gets the digest just pushed (and
//! `imagePullPolicy: IfNotPresent` when it has none), and the result is the bytes that
//! are signed and that Fundament installs.
//!
//! The edit is made on the text, touching only the lines of those two keys, so the
//! author's comments, order and formatting survive and the hash stays predictable; the
//! result is then parsed like any definition, and must carry exactly the new image.

use super::{Definition, ImageRef, InvalidDefinition};

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("--image {0}")]
    Image(super::ImageRefError),
    #[error(
        "cannot set spec.image: {0}; write `spec:` as a block (one key per line) or set the image by hand"
    )]
    Shape(&'static str),
    #[error(transparent)]
    Invalid(#[from] InvalidDefinition),
}

/// `text` with `spec.image` set to `image` (replacing any image already there) and
/// `spec.imagePullPolicy: IfNotPresent` added when absent, parsed and checked.
pub fn set_image(text: &str, image: &str) -> Result<Definition, EditError> {
    let reference = ImageRef::parse(image).map_err(EditError::Image)?;
    let edited = edit(text, &reference.to_string())?;
    let def = Definition::parse(edited.as_bytes())?;
    if def.image != reference {
        // The edit missed (a key written in a form this editor does not recognize):
        // never publish an image other than the one asked for.
        return Err(EditError::Shape(
            "spec.image is written in a form this edit does not recognize",
        ));
    }
    Ok(def)
}

struct Line<'a> {
    /// Without its line ending.
    text: &'a str,
    ending: &'a str,
}

impl Line<'_> {
    fn indent(&self) -> usize {
        self.text.len() - self.text.trim_start_matches(' ').len()
    }

    /// Blank or a comment: belongs to no key.
    fn is_filler(&self) -> bool {
        let t = self.text.trim_start();
        t.is_empty() || t.starts_with('#')
    }

    /// Whether the line is `key:` at `indent`, followed by a value, a comment or nothing.
    fn is_key(&self, indent: usize, key: &str) -> bool {
        self.indent() == indent
            && self.text[indent..]
                .strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    }
}

fn lines(text: &str) -> Vec<Line<'_>> {
    text.split_inclusive('\n')
        .map(|l| {
            let body = l.trim_end_matches('\n').trim_end_matches('\r');
            Line {
                text: body,
                ending: &l[body.len()..],
            }
        })
        .collect()
}

fn edit(text: &str, image: &str) -> Result<String, EditError> {
    let lines = lines(text);
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let Some(spec) = lines.iter().position(|l| l.is_key(0, "spec")) else {
        return Err(EditError::Shape("the document has no top-level `spec:`"));
    };
    let after_colon = lines[spec].text["spec:".len()..].trim_start();
    if !(after_colon.is_empty() || after_colon.starts_with('#')) {
        return Err(EditError::Shape("`spec:` is written inline"));
    }
    // The spec's block: up to the next line at column 0 that is not filler.
    let end = lines[spec + 1..]
        .iter()
        .position(|l| !l.is_filler() && l.indent() == 0)
        .map_or(lines.len(), |i| spec + 1 + i);
    let indent = lines[spec + 1..end]
        .iter()
        .find(|l| !l.is_filler())
        .map_or(2, Line::indent);
    let key_at = |key: &str| (spec + 1..end).find(|&i| lines[i].is_key(indent, key));
    // A key's value may continue on more-indented lines (a block scalar): those go with
    // it; blank lines and comments stay.
    let value_end = |start: usize| {
        (start + 1..end)
            .find(|&i| !lines[i].is_filler() && lines[i].indent() <= indent)
            .unwrap_or(end)
    };
    let pad = " ".repeat(indent);
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 2);
    let image_line = format!("{pad}image: {image}");
    let policy_line = format!("{pad}imagePullPolicy: IfNotPresent");
    let has_policy = key_at("imagePullPolicy").is_some();
    let ending = |l: &Line| {
        if l.ending.is_empty() {
            newline.to_owned()
        } else {
            l.ending.to_owned()
        }
    };
    match key_at("image") {
        Some(at) => {
            let skip = value_end(at);
            for (i, l) in lines.iter().enumerate() {
                if i == at {
                    out.push(format!("{image_line}{}", ending(l)));
                    if !has_policy {
                        out.push(format!("{policy_line}{newline}"));
                    }
                } else if !(at < i && i < skip && !l.is_filler()) {
                    out.push(format!("{}{}", l.text, l.ending));
                }
            }
        }
        None => {
            // After the spec's last line that is not filler.
            let last = (spec..end)
                .rev()
                .find(|&i| i == spec || !lines[i].is_filler())
                .unwrap_or(spec);
            for (i, l) in lines.iter().enumerate() {
                let this_ending = if i == last {
                    ending(l)
                } else {
                    l.ending.to_owned()
                };
                out.push(format!("{}{this_ending}", l.text));
                if i == last {
                    out.push(format!("{image_line}{newline}"));
                    if !has_policy {
                        out.push(format!("{policy_line}{newline}"));
                    }
                }
            }
        }
    }
    Ok(out.concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn image() -> String {
        format!("ghcr.io/acme/demo@{DIGEST}")
    }

    const SOURCE: &str = "apiVersion: fundament.io/v1
kind: PluginDefinition
metadata:
  name: demo
  version: v1.0.0
spec:
  permissions:
    capabilities: [internet_access]   # pulls charts

  crds:
    - demos.acme.example.com
# trailing comment
";

    #[test]
    fn an_image_free_definition_gets_image_and_pull_policy_after_its_last_key() {
        let def = set_image(SOURCE, &image()).unwrap();
        let text = String::from_utf8(def.bytes.clone()).unwrap();
        assert_eq!(
            text,
            SOURCE.replace(
                "    - demos.acme.example.com\n",
                &format!(
                    "    - demos.acme.example.com\n  image: {}\n  imagePullPolicy: IfNotPresent\n",
                    image()
                )
            )
        );
        assert_eq!(def.manifest.spec.image_pull_policy.as_str(), "IfNotPresent");
    }

    #[test]
    fn an_image_already_there_is_replaced_and_a_pull_policy_kept() {
        let src = SOURCE.replace(
            "  crds:",
            "  image: ghcr.io/acme/old@sha256:2222222222222222222222222222222222222222222222222222222222222222 # old\n  imagePullPolicy: Always\n  crds:",
        );
        let def = set_image(&src, &image()).unwrap();
        let text = String::from_utf8(def.bytes).unwrap();
        assert!(text.contains(&format!(
            "  image: {}\n  imagePullPolicy: Always\n",
            image()
        )));
        assert!(!text.contains("old@"));
        assert_eq!(text.lines().count(), src.lines().count());
    }

    #[test]
    fn crlf_files_stay_crlf() {
        let src = SOURCE.replace('\n', "\r\n");
        let def = set_image(&src, &image()).unwrap();
        let text = String::from_utf8(def.bytes).unwrap();
        assert!(!text.replace("\r\n", "").contains('\n'), "{text:?}");
    }

    #[test]
    fn refusals_name_why() {
        let e = set_image(SOURCE, "ghcr.io/acme/demo:v1").unwrap_err();
        assert!(e.to_string().starts_with("--image "), "{e}");
        let inline = "apiVersion: fundament.io/v1\nkind: PluginDefinition\nmetadata: {name: demo, version: v1.0.0}\nspec: {crds: []}\n";
        let e = set_image(inline, &image()).unwrap_err();
        assert!(e.to_string().contains("`spec:` is written inline"), "{e}");
        // The rest of the definition is still checked.
        let bad = SOURCE.replace("name: demo", "name: Demo");
        assert!(matches!(
            set_image(&bad, &image()),
            Err(EditError::Invalid(_))
        ));
    }
}
