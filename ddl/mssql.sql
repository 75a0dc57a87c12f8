BEGIN TRANSACTION;

CREATE TABLE scheduled_tasks_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT scheduled_tasks_version_pkc PRIMARY KEY (version_num)
);

GO

-- Running upgrade  -> dbscheduler_0001

CREATE TABLE scheduled_tasks (
    id BIGINT NOT NULL IDENTITY, 
    queue_name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    payload NVARCHAR(max) NULL, 
    created_at DATETIME2(6) NOT NULL, 
    next_process_at DATETIME2(6) NOT NULL, 
    attempt INTEGER NOT NULL DEFAULT 0, 
    reenqueue_attempt BIGINT NOT NULL DEFAULT 0, 
    total_attempt BIGINT NOT NULL DEFAULT 0, 
    paused BIT NOT NULL DEFAULT 0, 
    locked_by NVARCHAR(255) NULL, 
    heartbeat_at DATETIME2(6) NULL, 
    last_started_at DATETIME2(6) NULL, 
    last_finished_at DATETIME2(6) NULL, 
    last_status NVARCHAR(16) NULL, 
    last_error NVARCHAR(2000) NULL, 
    schedule NVARCHAR(500) NULL, 
    stop_requested BIT NOT NULL DEFAULT 0, 
    PRIMARY KEY (id), 
    CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)
);

GO

CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at);

GO

INSERT INTO scheduled_tasks_version (version_num) VALUES ('dbscheduler_0001');

GO

-- Running upgrade dbscheduler_0001 -> dbscheduler_0002

ALTER TABLE scheduled_tasks ADD claim VARCHAR(32) NULL;

GO

ALTER TABLE scheduled_tasks ADD prev_locked_by NVARCHAR(255) NULL;

GO

ALTER TABLE scheduled_tasks ADD prev_next_process_at DATETIME2(6) NULL;

GO

ALTER TABLE scheduled_tasks ADD prev_last_started_at DATETIME2(6) NULL;

GO

CREATE INDEX scheduled_tasks_claim_idx ON scheduled_tasks (claim);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0002' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0001';

GO

-- Running upgrade dbscheduler_0002 -> dbscheduler_0003

ALTER TABLE scheduled_tasks ADD handler NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL;

GO

ALTER TABLE scheduled_tasks ADD data NVARCHAR(max) NULL;

GO

ALTER TABLE scheduled_tasks ADD options NVARCHAR(2000) NULL;

GO

UPDATE scheduled_tasks SET handler=scheduled_tasks.queue_name;

GO

CREATE INDEX scheduled_tasks_handler_idx ON scheduled_tasks (handler, next_process_at);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0003' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0002';

GO

-- Running upgrade dbscheduler_0003 -> dbscheduler_0004

ALTER TABLE scheduled_tasks ADD priority INTEGER NOT NULL DEFAULT 0;

GO

ALTER TABLE scheduled_tasks ADD task_group NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL;

GO

ALTER TABLE scheduled_tasks ADD requires NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NULL;

GO

CREATE INDEX scheduled_tasks_group_idx ON scheduled_tasks (task_group, locked_by) WHERE task_group IS NOT NULL;

GO

CREATE INDEX scheduled_tasks_pick_idx ON scheduled_tasks (handler, priority DESC, next_process_at) WHERE priority != 0;

GO

CREATE TABLE scheduled_tasks_groups (
    name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    max_running INTEGER NOT NULL, 
    updated_at DATETIME2(6) NULL, 
    PRIMARY KEY (name)
);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0004' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0003';

GO

-- Running upgrade dbscheduler_0004 -> dbscheduler_0005

ALTER TABLE scheduled_tasks ADD last_success_at DATETIME2(6) NULL;

GO

ALTER TABLE scheduled_tasks ADD alert_after DOUBLE PRECISION NULL;

GO

ALTER TABLE scheduled_tasks ADD alerted_at DATETIME2(6) NULL;

GO

UPDATE scheduled_tasks SET last_success_at=scheduled_tasks.last_finished_at WHERE scheduled_tasks.last_status = N'success';

GO

CREATE INDEX scheduled_tasks_alert_idx ON scheduled_tasks (alerted_at, alert_after);

GO

CREATE TABLE scheduled_tasks_runs (
    id BIGINT NOT NULL IDENTITY, 
    task_name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    token BIGINT NOT NULL, 
    attempt INTEGER NOT NULL, 
    node_id NVARCHAR(255) NOT NULL, 
    scheduled_at DATETIME2(6) NOT NULL, 
    started_at DATETIME2(6) NOT NULL, 
    finished_at DATETIME2(6) NOT NULL, 
    status NVARCHAR(16) NOT NULL, 
    error NVARCHAR(2000) NULL, 
    PRIMARY KEY (id), 
    CONSTRAINT scheduled_tasks_runs_uq UNIQUE (task_name, token, started_at)
);

GO

CREATE INDEX scheduled_tasks_runs_task_idx ON scheduled_tasks_runs (task_name, finished_at);

GO

CREATE INDEX scheduled_tasks_runs_time_idx ON scheduled_tasks_runs (finished_at);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0005' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0004';

GO

-- Running upgrade dbscheduler_0005 -> dbscheduler_0006

CREATE TABLE scheduled_tasks_items (
    id BIGINT NOT NULL IDENTITY, 
    task_name NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    handler NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    batch_key NVARCHAR(255) COLLATE Latin1_General_100_BIN2 NOT NULL, 
    item NVARCHAR(max) NULL, 
    due_at DATETIME2(6) NOT NULL, 
    moves BIT NOT NULL DEFAULT 0, 
    pushed_at DATETIME2(6) NOT NULL, 
    PRIMARY KEY (id)
);

GO

CREATE INDEX scheduled_tasks_items_key_idx ON scheduled_tasks_items (handler, batch_key);

GO

CREATE INDEX scheduled_tasks_items_task_idx ON scheduled_tasks_items (task_name, id);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0006' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0005';

GO

-- Running upgrade dbscheduler_0006 -> dbscheduler_0007

ALTER TABLE scheduled_tasks ADD trigger_link VARCHAR(128) NULL;

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0007' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0006';

GO

-- Running upgrade dbscheduler_0007 -> dbscheduler_0008

CREATE TABLE scheduled_tasks_nodes (
    node_id NVARCHAR(255) NOT NULL, 
    host NVARCHAR(255) NOT NULL, 
    pid INTEGER NOT NULL, 
    version NVARCHAR(64) NOT NULL, 
    tags NVARCHAR(max) NULL, 
    handlers NVARCHAR(max) NULL, 
    started_at DATETIME2(6) NOT NULL, 
    last_seen DATETIME2(6) NOT NULL, 
    running INTEGER NOT NULL, 
    PRIMARY KEY (node_id)
);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0008' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0007';

GO

-- Running upgrade dbscheduler_0008 -> dbscheduler_0009

ALTER TABLE scheduled_tasks_runs ADD traceback NVARCHAR(max) NULL;

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0009' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0008';

GO

-- Running upgrade dbscheduler_0009 -> dbscheduler_0010

CREATE INDEX scheduled_tasks_runs_status_idx ON scheduled_tasks_runs (status, finished_at);

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0010' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0009';

GO

-- Running upgrade dbscheduler_0010 -> dbscheduler_0011

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0011' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0010';

GO

-- Running upgrade dbscheduler_0011 -> dbscheduler_0012

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0012' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0011';

GO

COMMIT;

GO

