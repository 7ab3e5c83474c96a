//! A realistic fixture: several databases (one empty, one whose name needs quoting, one in
//! latin1), InnoDB tables with primary and secondary keys, a foreign key, incompressible
//! binary columns and non-ASCII utf8mb4 text, Aria and MyISAM tables, a partitioned table, a
//! table without primary key, an empty table, a sequence, views (one with a non-root definer),
//! a procedure, a function, triggers and an event.
//!
//! Rows are generated server-side with `INSERT ... SELECT` from the sequence engine
//! (`seq_1_to_N`), in batches, so loading a million rows takes seconds and no round trip per
//! row. All values are deterministic functions of the row number.

use anyhow::{Context, Result};

use crate::mariadb::MariaDb;

/// The databases [`load_fixture`] creates. None is named after the product, so a backup that
/// mixes up names shows.
pub const FIXTURE_DATABASES: &[&str] = &["orchard", "tidewater", "tide-pool", "fallow"];

/// Rows inserted per `INSERT ... SELECT`, to keep each transaction's undo log modest.
const BATCH: usize = 200_000;

/// Schema, users and definitions. Tables are filled afterwards; triggers come last so the
/// bulk load does not fire them.
const SCHEMA: &str = r#"
CREATE DATABASE orchard CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE DATABASE tidewater CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
CREATE DATABASE `tide-pool` CHARACTER SET latin1 COLLATE latin1_swedish_ci;
CREATE DATABASE fallow;

CREATE USER IF NOT EXISTS 'fixture_owner'@'localhost' ACCOUNT LOCK;
GRANT SELECT, EXECUTE ON orchard.* TO 'fixture_owner'@'localhost';

CREATE TABLE orchard.customers (
  id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  email VARCHAR(190) NOT NULL,
  display_name VARCHAR(100) NOT NULL,
  country CHAR(2) NOT NULL,
  balance DECIMAL(12,2) NOT NULL DEFAULT 0,
  created_at DATETIME(6) NOT NULL,
  updated_at TIMESTAMP NULL DEFAULT NULL,
  UNIQUE KEY uk_email (email),
  KEY idx_country_name (country, display_name)
) ENGINE=InnoDB COMMENT='Kundenstamm – customers';

CREATE TABLE orchard.orders (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  customer_id INT UNSIGNED NOT NULL,
  status ENUM('new','paid','shipped','cancelled') NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  placed_at DATETIME NOT NULL,
  note TEXT NULL,
  payload BLOB NOT NULL,
  KEY idx_customer (customer_id),
  KEY idx_status_placed (status, placed_at),
  CONSTRAINT fk_orders_customer FOREIGN KEY (customer_id) REFERENCES orchard.customers (id)
) ENGINE=InnoDB;

CREATE TABLE orchard.refunds (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  order_id BIGINT UNSIGNED NOT NULL,
  reason VARCHAR(255) NOT NULL,
  KEY idx_order (order_id)
) ENGINE=InnoDB;

CREATE TABLE orchard.balance_audit (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  customer_id INT UNSIGNED NOT NULL,
  old_balance DECIMAL(12,2) NOT NULL,
  new_balance DECIMAL(12,2) NOT NULL,
  changed_at DATETIME(6) NOT NULL
) ENGINE=InnoDB;

CREATE SEQUENCE orchard.invoice_no START WITH 1000 INCREMENT BY 1 NOCACHE;

CREATE TABLE tidewater.readings (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  sensor_id SMALLINT UNSIGNED NOT NULL,
  taken_at DATETIME(3) NOT NULL,
  reading DOUBLE NOT NULL,
  tags JSON NOT NULL,
  raw VARBINARY(255) NOT NULL,
  KEY idx_sensor_time (sensor_id, taken_at)
) ENGINE=InnoDB;

CREATE TABLE tidewater.sensor_log (
  id INT UNSIGNED NOT NULL PRIMARY KEY,
  sensor_id SMALLINT UNSIGNED NOT NULL,
  message VARCHAR(200) NOT NULL,
  KEY idx_sensor (sensor_id)
) ENGINE=Aria TRANSACTIONAL=1;

CREATE TABLE tidewater.legacy_counters (
  id INT UNSIGNED NOT NULL PRIMARY KEY,
  label VARCHAR(64) NOT NULL,
  counter BIGINT NOT NULL,
  KEY idx_label (label)
) ENGINE=MyISAM;

CREATE TABLE tidewater.daily_rollup (
  day DATE NOT NULL,
  sensor_id SMALLINT UNSIGNED NOT NULL,
  avg_reading DOUBLE NOT NULL,
  PRIMARY KEY (day, sensor_id)
) ENGINE=InnoDB
PARTITION BY RANGE (YEAR(day)) (
  PARTITION p2023 VALUES LESS THAN (2024),
  PARTITION p2024 VALUES LESS THAN (2025),
  PARTITION pmax VALUES LESS THAN MAXVALUE
);

CREATE TABLE tidewater.raw_events_nopk (
  source VARCHAR(32) NOT NULL,
  body TEXT NOT NULL
) ENGINE=InnoDB;

CREATE TABLE `tide-pool`.`kelp forest` (
  id INT NOT NULL PRIMARY KEY,
  `common name` VARCHAR(80) NOT NULL,
  depth_m SMALLINT NOT NULL
) ENGINE=InnoDB;

CREATE DEFINER='fixture_owner'@'localhost' SQL SECURITY DEFINER VIEW orchard.order_totals AS
  SELECT customer_id, COUNT(*) AS orders, SUM(amount) AS total
  FROM orchard.orders GROUP BY customer_id;

CREATE DEFINER='root'@'localhost' SQL SECURITY INVOKER VIEW tidewater.latest_readings AS
  SELECT sensor_id, MAX(taken_at) AS last_seen FROM tidewater.readings GROUP BY sensor_id;

DELIMITER ;;
CREATE DEFINER='root'@'localhost' PROCEDURE orchard.mark_shipped(IN p_order BIGINT UNSIGNED)
  MODIFIES SQL DATA
  COMMENT 'Versand bestätigen'
BEGIN
  UPDATE orchard.orders SET status = 'shipped' WHERE id = p_order AND status = 'paid';
END;;

CREATE DEFINER='fixture_owner'@'localhost' FUNCTION orchard.order_tax(p_amount DECIMAL(12,2))
  RETURNS DECIMAL(12,2)
  DETERMINISTIC
  COMMENT 'Mehrwertsteuer – 19 %'
  RETURN ROUND(p_amount * 0.19, 2);;

CREATE DEFINER='root'@'localhost' EVENT tidewater.purge_old_readings
  ON SCHEDULE EVERY 1 DAY STARTS '2030-01-01 03:00:00'
  ON COMPLETION PRESERVE ENABLE
  COMMENT 'keeps 90 days'
  DO DELETE FROM tidewater.readings WHERE taken_at < NOW() - INTERVAL 90 DAY;;
DELIMITER ;
"#;

/// Triggers, created after the bulk load.
const TRIGGERS: &str = r#"
DELIMITER ;;
CREATE DEFINER='root'@'localhost' TRIGGER orchard.orders_check_amount
BEFORE INSERT ON orchard.orders FOR EACH ROW
BEGIN
  IF NEW.amount < 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'negative amount';
  END IF;
END;;

CREATE DEFINER='root'@'localhost' TRIGGER orchard.customers_audit_balance
AFTER UPDATE ON orchard.customers FOR EACH ROW
BEGIN
  IF NEW.balance <> OLD.balance THEN
    INSERT INTO orchard.balance_audit (customer_id, old_balance, new_balance, changed_at)
    VALUES (NEW.id, OLD.balance, NEW.balance, '2024-06-01 12:00:00');
  END IF;
END;;
DELIMITER ;
"#;

/// Loads the fixture into `db`; the two big tables (`orchard.orders`, `tidewater.readings`)
/// get `rows` rows each, the others a fraction (at least a handful).
pub fn load_fixture(db: &MariaDb, rows: usize) -> Result<()> {
    let rows = rows.max(1);
    let customers = (rows / 10).max(10);
    let small = (rows / 4).max(10);
    db.sql(SCHEMA)
        .context("failed to create the fixture schema")?;

    fill(db, customers, |from, to| {
        format!(
            "INSERT INTO orchard.customers (id, email, display_name, country, balance, created_at)
             SELECT seq, CONCAT('user', seq, '@example.org'),
               CONCAT(ELT(1 + seq % 6, 'Zoë', 'Ярослав', '李小龍', 'Łukasz', 'Ørjan', 'Siobhán'),
                      ' ', seq, IF(seq % 7 = 0, ' 🍎', '')),
               ELT(1 + seq % 5, 'DE', 'UA', 'TW', 'PL', 'NO'),
               (seq * 7919 % 100000) / 100,
               TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND
                 + INTERVAL (seq * 997 % 1000000) MICROSECOND
             FROM seq_{from}_to_{to}"
        )
    })?;

    fill(db, rows, |from, to| {
        format!(
            "INSERT INTO orchard.orders (id, customer_id, status, amount, placed_at, note, payload)
             SELECT seq, 1 + seq % {customers},
               ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'cancelled'),
               (seq * 104729 % 1000000) / 100,
               TIMESTAMP'2024-01-01 00:00:00' + INTERVAL (seq * 37) SECOND,
               IF(seq % 3 = 0, NULL,
                  CONCAT('Bestellung Nr. ', seq, ' – Größe ', seq % 44, ', délai ', seq % 9, ' jours')),
               CONCAT(UNHEX(SHA2(seq, 256)), UNHEX(SHA2(seq * 31, 256)),
                      REPEAT(CHAR(65 + seq % 26), 64 + seq % 64))
             FROM seq_{from}_to_{to}"
        )
    })?;

    fill(db, rows, |from, to| {
        format!(
            "INSERT INTO tidewater.readings (id, sensor_id, taken_at, reading, tags, raw)
             SELECT seq, seq % 500,
               TIMESTAMP'2024-03-01 00:00:00' + INTERVAL (seq * 1500000) MICROSECOND,
               (seq % 100003) / 7.0,
               JSON_OBJECT('site', ELT(1 + seq % 3, 'Kiel', 'Tromsø', 'Gdańsk'), 'ok', seq % 11 <> 0),
               UNHEX(SHA2(CONCAT('r', seq), 512))
             FROM seq_{from}_to_{to}"
        )
    })?;

    fill(db, small, |from, to| {
        format!(
            "INSERT INTO tidewater.sensor_log (id, sensor_id, message)
             SELECT seq, seq % 500, CONCAT('Kalibrierung ', seq, ' ✓ offset ', seq % 97)
             FROM seq_{from}_to_{to}"
        )
    })?;

    fill(db, small, |from, to| {
        format!(
            "INSERT INTO tidewater.legacy_counters (id, label, counter)
             SELECT seq, CONCAT('counter-', seq % 1000), seq * 2654435761 % 4294967296
             FROM seq_{from}_to_{to}"
        )
    })?;

    fill(db, (rows / 10).max(10), |from, to| {
        format!(
            "INSERT INTO tidewater.daily_rollup (day, sensor_id, avg_reading)
             SELECT DATE'2023-06-01' + INTERVAL (seq DIV 50) DAY, seq % 50, seq / 3.0
             FROM seq_{from}_to_{to}"
        )
    })?;

    db.sql(
        "USE orchard;
         INSERT INTO tidewater.raw_events_nopk (source, body)
           SELECT ELT(1 + seq % 3, 'gateway', 'buoy', 'gateway'), CONCAT('event ', seq % 40)
           FROM seq_1_to_100;
         INSERT INTO `tide-pool`.`kelp forest` (id, `common name`, depth_m)
           SELECT seq, CONCAT(ELT(1 + seq % 3, 'Varech géant', 'Laminaire', 'Fucus'), ' #', seq), seq % 40
           FROM seq_1_to_100;
         DO NEXTVAL(orchard.invoice_no), NEXTVAL(orchard.invoice_no), NEXTVAL(orchard.invoice_no);",
    )
    .context("failed to fill the small fixture tables")?;

    db.sql(TRIGGERS)
        .context("failed to create the fixture triggers")?;
    // Fire the audit trigger once so its table is not empty.
    db.sql("UPDATE orchard.customers SET balance = balance + 1 WHERE id = 1;")
        .context("failed to update a fixture row")?;
    Ok(())
}

/// Fills a table in batches; `insert(from, to)` returns the statement for rows `from..=to`.
fn fill(db: &MariaDb, rows: usize, insert: impl Fn(usize, usize) -> String) -> Result<()> {
    let mut from = 1;
    while from <= rows {
        let to = (from + BATCH - 1).min(rows);
        let statement = insert(from, to);
        // The sequence engine's virtual `seq_*` tables need a current database.
        db.sql(&format!("USE orchard;\n{statement};"))
            .with_context(|| format!("failed to load fixture rows {from}..={to}"))?;
        from = to + 1;
    }
    Ok(())
}
