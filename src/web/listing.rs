//! A publisher's listing on the plugin page: where it sets a field, the page shows it
//! instead of the definition's; its feature blocks and artwork have no counterpart in
//! the definition.

use std::collections::HashMap;

use super::views::{CatalogPage, PluginPage};
use crate::catalog::ListingView;

/// Up to two letters standing in for missing (or unreachable) artwork.
pub fn initials(display_name: &str) -> String {
    display_name
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(2)
        .filter_map(|w| w.chars().next())
        .flat_map(char::to_uppercase)
        .collect()
}

pub fn apply(mut page: PluginPage, l: &ListingView) -> PluginPage {
    let set = |listed: &str, current: &mut String| {
        if !listed.is_empty() {
            *current = listed.to_owned();
        }
    };
    set(&l.display_name, &mut page.display_name);
    set(&l.description, &mut page.description);
    if l.description.is_empty() && !l.description_short.is_empty() {
        page.description = l.description_short.clone();
    }
    set(&l.author_name, &mut page.author);
    set(&l.license, &mut page.license);
    if !l.tags.is_empty() {
        page.tags = l.tags.clone();
    }
    if !l.repository_url.is_empty() {
        page.urls.retain(|(label, _)| label != "Source code");
        page.urls
            .push(("Source code".to_owned(), l.repository_url.clone()));
    }
    if !l.author_url.is_empty() {
        page.urls.push(("Author".to_owned(), l.author_url.clone()));
    }
    for link in &l.documentation_links {
        if !page.urls.iter().any(|(_, url)| url == &link.url) {
            page.urls.push((link.title.clone(), link.url.clone()));
        }
    }
    page.features = l
        .features
        .iter()
        .map(|f| (f.title.clone(), f.body.clone()))
        .collect();
    page.artwork = l.image.clone();
    page.initials = initials(&page.display_name);
    page
}

/// Catalog cards with their listings' display names and short descriptions.
pub fn decorate(mut page: CatalogPage, listings: &HashMap<String, ListingView>) -> CatalogPage {
    for card in &mut page.cards {
        let Some(l) = listings.get(&crate::ids::plugin(&card.publisher, &card.name)) else {
            continue;
        };
        if !l.display_name.is_empty() {
            card.display_name = l.display_name.clone();
        }
        if !l.description_short.is_empty() {
            card.description = l.description_short.clone();
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::initials;

    #[test]
    fn initials_take_the_first_letters_of_two_words() {
        assert_eq!(initials("Cert Manager"), "CM");
        assert_eq!(initials("external-dns"), "ED");
        assert_eq!(initials("gateway"), "G");
        assert_eq!(initials(""), "");
    }
}
