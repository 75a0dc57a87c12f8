CREATE TABLE scheduled_tasks_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT scheduled_tasks_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> dbscheduler_0001

CREATE TABLE scheduled_tasks (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    queue_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    payload TEXT, 
    created_at DATETIME(6) NOT NULL, 
    next_process_at DATETIME(6) NOT NULL, 
    attempt INTEGER NOT NULL DEFAULT 0, 
    reenqueue_attempt BIGINT NOT NULL DEFAULT 0, 
    total_attempt BIGINT NOT NULL DEFAULT 0, 
    paused BOOL NOT NULL DEFAULT 0, 
    locked_by VARCHAR(255), 
    heartbeat_at DATETIME(6), 
    last_started_at DATETIME(6), 
    last_finished_at DATETIME(6), 
    last_status VARCHAR(16), 
    last_error VARCHAR(2000), 
    schedule VARCHAR(500), 
    stop_requested BOOL NOT NULL DEFAULT 0, 
    PRIMARY KEY (id), 
    CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at);

INSERT INTO scheduled_tasks_version (version_num) VALUES ('dbscheduler_0001');

-- Running upgrade dbscheduler_0001 -> dbscheduler_0002

ALTER TABLE scheduled_tasks ADD COLUMN claim VARCHAR(32);

ALTER TABLE scheduled_tasks ADD COLUMN prev_locked_by VARCHAR(255);

ALTER TABLE scheduled_tasks ADD COLUMN prev_next_process_at DATETIME(6);

ALTER TABLE scheduled_tasks ADD COLUMN prev_last_started_at DATETIME(6);

CREATE INDEX scheduled_tasks_claim_idx ON scheduled_tasks (claim);

ALTER TABLE scheduled_tasks MODIFY payload LONGTEXT NULL;

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0002' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0001';

-- Running upgrade dbscheduler_0002 -> dbscheduler_0003

ALTER TABLE scheduled_tasks ADD COLUMN handler VARCHAR(255) COLLATE utf8mb4_bin;

ALTER TABLE scheduled_tasks ADD COLUMN data LONGTEXT;

ALTER TABLE scheduled_tasks ADD COLUMN options VARCHAR(2000);

UPDATE scheduled_tasks SET handler=scheduled_tasks.queue_name;

CREATE INDEX scheduled_tasks_handler_idx ON scheduled_tasks (handler, next_process_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0003' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0002';

-- Running upgrade dbscheduler_0003 -> dbscheduler_0004

ALTER TABLE scheduled_tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

ALTER TABLE scheduled_tasks ADD COLUMN task_group VARCHAR(255) COLLATE utf8mb4_bin;

ALTER TABLE scheduled_tasks ADD COLUMN requires VARCHAR(255) COLLATE utf8mb4_bin;

CREATE INDEX scheduled_tasks_group_idx ON scheduled_tasks (task_group, locked_by);

CREATE TABLE scheduled_tasks_groups (
    name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    max_running INTEGER NOT NULL, 
    updated_at DATETIME(6), 
    PRIMARY KEY (name)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0004' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0003';

-- Running upgrade dbscheduler_0004 -> dbscheduler_0005

ALTER TABLE scheduled_tasks ADD COLUMN last_success_at DATETIME(6);

ALTER TABLE scheduled_tasks ADD COLUMN alert_after DOUBLE;

ALTER TABLE scheduled_tasks ADD COLUMN alerted_at DATETIME(6);

UPDATE scheduled_tasks SET last_success_at=scheduled_tasks.last_finished_at WHERE scheduled_tasks.last_status = 'success';

CREATE INDEX scheduled_tasks_alert_idx ON scheduled_tasks (alerted_at, alert_after);

CREATE TABLE scheduled_tasks_runs (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    task_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    token BIGINT NOT NULL, 
    attempt INTEGER NOT NULL, 
    node_id VARCHAR(255) NOT NULL, 
    scheduled_at DATETIME(6) NOT NULL, 
    started_at DATETIME(6) NOT NULL, 
    finished_at DATETIME(6) NOT NULL, 
    status VARCHAR(16) NOT NULL, 
    error VARCHAR(2000), 
    PRIMARY KEY (id), 
    CONSTRAINT scheduled_tasks_runs_uq UNIQUE (task_name, token, started_at)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX scheduled_tasks_runs_task_idx ON scheduled_tasks_runs (task_name, finished_at);

CREATE INDEX scheduled_tasks_runs_time_idx ON scheduled_tasks_runs (finished_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0005' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0004';

-- Running upgrade dbscheduler_0005 -> dbscheduler_0006

CREATE TABLE scheduled_tasks_items (
    id BIGINT NOT NULL AUTO_INCREMENT, 
    task_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    handler VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    batch_key VARCHAR(255) COLLATE utf8mb4_bin NOT NULL, 
    item LONGTEXT, 
    due_at DATETIME(6) NOT NULL, 
    moves BOOL NOT NULL DEFAULT 0, 
    pushed_at DATETIME(6) NOT NULL, 
    PRIMARY KEY (id)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

CREATE INDEX scheduled_tasks_items_key_idx ON scheduled_tasks_items (handler, batch_key);

CREATE INDEX scheduled_tasks_items_task_idx ON scheduled_tasks_items (task_name, id);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0006' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0005';

-- Running upgrade dbscheduler_0006 -> dbscheduler_0007

ALTER TABLE scheduled_tasks ADD COLUMN trigger_link VARCHAR(128);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0007' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0006';

-- Running upgrade dbscheduler_0007 -> dbscheduler_0008

CREATE TABLE scheduled_tasks_nodes (
    node_id VARCHAR(255) NOT NULL, 
    host VARCHAR(255) NOT NULL, 
    pid INTEGER NOT NULL, 
    version VARCHAR(64) NOT NULL, 
    tags LONGTEXT, 
    handlers LONGTEXT, 
    started_at DATETIME(6) NOT NULL, 
    last_seen DATETIME(6) NOT NULL, 
    running INTEGER NOT NULL, 
    PRIMARY KEY (node_id)
)ENGINE=InnoDB CHARSET=utf8mb4 COLLATE utf8mb4_bin;

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0008' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0007';

-- Running upgrade dbscheduler_0008 -> dbscheduler_0009

ALTER TABLE scheduled_tasks_runs ADD COLUMN traceback LONGTEXT;

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0009' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0008';

-- Running upgrade dbscheduler_0009 -> dbscheduler_0010

CREATE INDEX scheduled_tasks_runs_status_idx ON scheduled_tasks_runs (status, finished_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0010' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0009';

-- Running upgrade dbscheduler_0010 -> dbscheduler_0011

CREATE INDEX scheduled_tasks_rank_idx ON scheduled_tasks (priority, next_process_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0011' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0010';

-- Running upgrade dbscheduler_0011 -> dbscheduler_0012

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0012' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0011';

