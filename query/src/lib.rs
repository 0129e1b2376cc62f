//! The read path: a tenant's logs back from the store, line for line, exactly once.
//!
//! [`Reader`] opens [`TenantScope`]s over the store the node writes. A scope is a DataFusion
//! session that sees one tenant and nothing else:
//!
//! - `records`: a listing table over `<prefix>/records/tenant=<T>/`, with the partition
//!   columns `date` (`YYYY-MM-DD`) and `hour` (`HH`) from the object paths;
//! - `audit`: a listing table over `<prefix>/audit/tenant=<T>/`, with `date`;
//! - `logs`: a view of `records` with each row's `line` rebuilt byte for byte (the kept body,
//!   or its template's text with the params put back), one row per record id (a store holding a
//!   duplicate object still reads each line once) and no row whose template the registry does
//!   not define yet (I3 from the reader's side).
//!
//! The scope is the tenant's prefix, fixed when the scope is made: SQL cannot widen it (DDL,
//! DML and statements are refused, URL tables are off), and a tenant id is one path segment.
//!
//! The template registry ([`Registry`]) is kept per tenant by the reader and refreshed
//! incrementally (only audit objects it has not read) each time a scope is opened.

mod line;
mod lines;
pub mod loki;
pub mod metrics;
mod registry;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_schema::{DataType, Field, Schema};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};
use datafusion::logical_expr::ScalarUDF;
use object_store::ObjectStore;
use ourios_wal::TenantId;

/// The engine, for callers that print or convert what a scope returns (one copy of DataFusion
/// and its arrow in the graph).
pub use datafusion;
pub use line::{KNOWN_FN, LINE_FN};
pub use lines::{
    Format, LINE_COLUMNS, LineQuery, Order, Severity, map_pairs, parse_time, rfc3339, unix_nanos,
    write_rows,
};
pub use registry::{Refresh, Registry, Templates};

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// Listing or reading the store failed.
    #[error("store read failed")]
    Store(#[from] object_store::Error),
    /// An audit object could not be read.
    #[error("audit series unreadable")]
    Audit(#[from] ourios_sinks::ReadError),
    /// The engine refused or failed the query (a SQL error names the problem).
    #[error(transparent)]
    Engine(#[from] datafusion::error::DataFusionError),
    /// Arrow refused a conversion of a result column.
    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),
    /// A query argument is not valid (the message names it).
    #[error("{0}")]
    Invalid(String),
}

/// Opens tenant scopes over one store and keeps each tenant's template registry warm.
#[derive(Debug)]
pub struct Reader {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    target_partitions: usize,
    // One registry per tenant; the async lock serialises refreshes of one tenant.
    registries: Mutex<HashMap<TenantId, Arc<tokio::sync::Mutex<Registry>>>>,
}

/// The URL the store is registered under in every session (never a real host).
const STORE_URL: &str = "ourios://store/";

impl Reader {
    /// A reader of `store`, whose objects live below `prefix` (empty for the store root, as
    /// the node writes them).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: impl Into<String>) -> Self {
        Self {
            store,
            prefix: prefix.into(),
            target_partitions: std::thread::available_parallelism().map_or(2, |n| n.get()),
            registries: Mutex::new(HashMap::new()),
        }
    }

    /// How many partitions DataFusion splits a scan into (default: the cores).
    pub fn with_target_partitions(mut self, n: usize) -> Self {
        self.target_partitions = n.max(1);
        self
    }

    /// The store this reader reads.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    fn registry(&self, tenant: &TenantId) -> Arc<tokio::sync::Mutex<Registry>> {
        let mut map = ourios_recoverable::lock(&self.registries);
        Arc::clone(map.entry(tenant.clone()).or_default())
    }

    /// Refresh `tenant`'s registry and open a scope that sees only its rows.
    pub async fn scope(&self, tenant: &TenantId) -> Result<TenantScope, QueryError> {
        let registry = self.registry(tenant);
        let templates = {
            let mut registry = registry.lock().await;
            registry
                .refresh(self.store.as_ref(), &self.prefix, tenant)
                .await?;
            registry.templates()
        };
        let config = SessionConfig::new()
            .with_target_partitions(self.target_partitions)
            .with_information_schema(false);
        let ctx = SessionContext::new_with_config(config);
        let url = url::Url::parse(STORE_URL).map_err(|e| QueryError::Invalid(e.to_string()))?;
        ctx.register_object_store(&url, Arc::clone(&self.store));
        let utf8 = |name: &str| Field::new(name, DataType::Utf8, false);
        ctx.register_table(
            "records",
            self.table(
                "records",
                tenant,
                ourios_sinks::record_schema(),
                vec![utf8("date"), utf8("hour")],
            )?,
        )?;
        ctx.register_table(
            "audit",
            self.table(
                "audit",
                tenant,
                ourios_sinks::audit_schema(),
                vec![utf8("date")],
            )?,
        )?;
        let line = Arc::new(ScalarUDF::from(line::LineFn::new(Arc::clone(&templates))));
        let known = Arc::new(ScalarUDF::from(line::KnownFn::new(Arc::clone(&templates))));
        ctx.register_udf(ScalarUDF::clone(&line));
        ctx.register_udf(ScalarUDF::clone(&known));
        ctx.sql(LOGS_VIEW).await?.collect().await?;
        Ok(TenantScope {
            ctx,
            tenant: tenant.clone(),
            templates,
            line,
            known,
        })
    }

    fn table(
        &self,
        kind: &str,
        tenant: &TenantId,
        schema: arrow_schema::SchemaRef,
        partition_cols: Vec<Field>,
    ) -> Result<Arc<ListingTable>, QueryError> {
        let root = registry::tenant_root(&self.prefix, kind, tenant);
        let url = ListingTableUrl::parse(format!("{STORE_URL}{root}/"))?;
        let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
            .with_file_extension(".parquet")
            .with_table_partition_cols(
                partition_cols
                    .iter()
                    .map(|f| (f.name().clone(), f.data_type().clone()))
                    .collect(),
            );
        // The file schema without the partition columns (the files do not carry them).
        let file_schema = Arc::new(Schema::new(schema.fields().clone()));
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(file_schema);
        Ok(Arc::new(ListingTable::try_new(config)?))
    }
}

/// The `logs` view: one row per record id, each with its line. Correct for any SQL (a
/// self-join reads it twice), at the price of a hash aggregate over the columns a query reads;
/// `LineQuery` and the Loki endpoints use [`TenantScope::records_once`] instead.
///
/// Deduplication groups by the record id together with the columns readers filter on (`time`,
/// `severity_number`, `date`, `hour`): copies of one record are identical, so this is one row
/// per id, and because those columns are grouping keys a filter on them is pushed below the
/// grouping into the scan, where it prunes partitions and row groups. Every other column is
/// the group's first value. `ourios_known` keeps out records whose template the registry
/// snapshot does not define, without rebuilding lines a query does not ask for.
const LOGS_VIEW: &str = "CREATE VIEW logs AS \
SELECT time, severity_number, \
       first_value(severity_text) AS severity_text, \
       first_value(ourios_line(template_key, params, body)) AS line, \
       first_value(attributes) AS attributes, \
       first_value(resource_attributes) AS resource_attributes, \
       first_value(observed_time) AS observed_time, \
       first_value(trace_id) AS trace_id, \
       first_value(span_id) AS span_id, \
       first_value(template_key) AS template_key, \
       first_value(template_id) AS template_id, \
       first_value(template_version) AS template_version, \
       wal_id, record_lsn, record_index, date, hour \
FROM records \
WHERE body IS NOT NULL OR ourios_known(template_key) \
GROUP BY wal_id, record_lsn, record_index, time, severity_number, date, hour";

/// One tenant's view of the store (see the crate docs).
pub struct TenantScope {
    ctx: SessionContext,
    tenant: TenantId,
    templates: Arc<Templates>,
    line: Arc<ScalarUDF>,
    known: Arc<ScalarUDF>,
}

impl std::fmt::Debug for TenantScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantScope")
            .field("tenant", &self.tenant)
            .field("templates", &self.templates.len())
            .finish_non_exhaustive()
    }
}

impl TenantScope {
    /// The tenant this scope sees.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// How many template keys the registry snapshot of this scope defines.
    pub fn template_count(&self) -> usize {
        self.templates.len()
    }

    /// The DataFusion session (tables `records`, `audit`, view `logs`).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The `line` of a `records` row: `ourios_line(template_key, params, body)`.
    pub fn line_expr(&self) -> datafusion::logical_expr::Expr {
        use datafusion::logical_expr::col;
        self.line
            .call(vec![col("template_key"), col("params"), col("body")])
    }

    /// The tenant's `records`, each record once and only those whose line can be rebuilt: the
    /// fast form of the `logs` view for a plan that runs **once**. Instead of grouping (which
    /// carries every column through a hash aggregate), a stateful filter keeps the first copy
    /// of each record id it meets (a bitset per WAL frame); filters on any column still reach
    /// the scan. Executing the same plan a second time finds every id met: plan again.
    pub async fn records_once(&self) -> Result<datafusion::dataframe::DataFrame, QueryError> {
        use datafusion::logical_expr::col;
        let first = ScalarUDF::from(line::FirstFn::new());
        let readable = col("body")
            .is_not_null()
            .or(self.known.call(vec![col("template_key")]));
        let first_copy = first.call(vec![col("wal_id"), col("record_lsn"), col("record_index")]);
        Ok(self
            .ctx
            .table("records")
            .await?
            .filter(readable.and(first_copy))?)
    }

    /// Plan a read-only SQL query over this tenant's tables. DDL (`CREATE EXTERNAL TABLE`, a
    /// way out of the scope), DML and statements (`SET`, transactions) are refused.
    pub async fn sql(&self, sql: &str) -> Result<datafusion::dataframe::DataFrame, QueryError> {
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        Ok(self.ctx.sql_with_options(sql, options).await?)
    }
}
