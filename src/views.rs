//! What `status` shows of the chat collections beside the lease: per
//! collection our counts (searchable, indexed, to index), LibreChat's own
//! `getSyncProgress()`, so an operator sees that LibreChat agrees, and how
//! follow mode learns of its deletes ([`DeleteRegime`], also in `/status`).
//! Read from MongoDB only (`status` does not reach Meilisearch); five counts
//! per collection, each over the whole collection, and one
//! `listCollections`.

use mongodb::Database;
use serde::Serialize;

use crate::config::PreImages;
use crate::librechat::Rules;
use crate::mongo::{self, Collection, Counts, LibreChatProgress, MongoError};

/// One collection, both views.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CollectionView {
    pub(crate) collection: Collection,
    /// Ours: searchable (`indexable`), processed (`indexed`), `unindexed`
    /// (what the next run sends) and `flagged`.
    pub(crate) ours: Counts,
    /// LibreChat's `getSyncProgress()`.
    pub(crate) librechat: LibreChatProgress,
    /// How follow mode learns of the collection's deletes.
    pub(crate) deletes: DeleteRegime,
}

/// How follow mode learns of a collection's deletes (docs/design.md §4.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum DeleteRegime {
    /// The collection keeps pre-images (and `follow.pre_images` is not
    /// `off`): a delete names its Meilisearch document and is applied
    /// within the follow latency.
    PreImages,
    /// No pre-images: a delete reaches Meilisearch through the id-set
    /// comparison, within `follow.orphan_check_every` plus one comparison
    /// (plus `lease.ttl` when the owner dies first).
    IdComparison,
}

impl DeleteRegime {
    pub(crate) fn of(has_pre_images: bool) -> Self {
        match has_pre_images {
            true => DeleteRegime::PreImages,
            false => DeleteRegime::IdComparison,
        }
    }
}

/// Both views of both collections at MongoDB's current time; `pre_images`
/// is `follow.pre_images`.
pub async fn collections(
    db: &Database,
    rules: &Rules,
    pre_images: PreImages,
) -> Result<Vec<CollectionView>, MongoError> {
    let now = mongo::server_time(db).await?;
    let with_pre_images = match pre_images {
        PreImages::Off => Vec::new(),
        _ => mongo::collections_with_pre_images(db).await?,
    };
    let mut views = Vec::new();
    for collection in Collection::ALL {
        views.push(CollectionView {
            collection,
            ours: mongo::counts(db, rules, collection, now).await?,
            librechat: mongo::librechat_progress(db, rules, collection, now).await?,
            deletes: DeleteRegime::of(with_pre_images.contains(&collection)),
        });
    }
    Ok(views)
}
