CREATE TABLE scheduled_tasks_version (
    version_num VARCHAR(32) NOT NULL, 
    CONSTRAINT scheduled_tasks_version_pkc PRIMARY KEY (version_num)
);

-- Running upgrade  -> dbscheduler_0001

CREATE TABLE scheduled_tasks (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
    queue_name VARCHAR(255) NOT NULL, 
    payload TEXT, 
    created_at VARCHAR(26) NOT NULL, 
    next_process_at VARCHAR(26) NOT NULL, 
    attempt INTEGER DEFAULT 0 NOT NULL, 
    reenqueue_attempt BIGINT DEFAULT 0 NOT NULL, 
    total_attempt BIGINT DEFAULT 0 NOT NULL, 
    paused BOOLEAN DEFAULT 0 NOT NULL, 
    locked_by VARCHAR(255), 
    heartbeat_at VARCHAR(26), 
    last_started_at VARCHAR(26), 
    last_finished_at VARCHAR(26), 
    last_status VARCHAR(16), 
    last_error VARCHAR(2000), 
    schedule VARCHAR(500), 
    stop_requested BOOLEAN DEFAULT 0 NOT NULL, 
    CONSTRAINT scheduled_tasks_uq UNIQUE (queue_name)
);

CREATE INDEX scheduled_tasks_next_idx ON scheduled_tasks (next_process_at);

INSERT INTO scheduled_tasks_version (version_num) VALUES ('dbscheduler_0001');

-- Running upgrade dbscheduler_0001 -> dbscheduler_0002

ALTER TABLE scheduled_tasks ADD COLUMN claim VARCHAR(32);

ALTER TABLE scheduled_tasks ADD COLUMN prev_locked_by VARCHAR(255);

ALTER TABLE scheduled_tasks ADD COLUMN prev_next_process_at VARCHAR(26);

ALTER TABLE scheduled_tasks ADD COLUMN prev_last_started_at VARCHAR(26);

CREATE INDEX scheduled_tasks_claim_idx ON scheduled_tasks (claim);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0002' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0001';

-- Running upgrade dbscheduler_0002 -> dbscheduler_0003

ALTER TABLE scheduled_tasks ADD COLUMN handler VARCHAR(255);

ALTER TABLE scheduled_tasks ADD COLUMN data TEXT;

ALTER TABLE scheduled_tasks ADD COLUMN options VARCHAR(2000);

UPDATE scheduled_tasks SET handler=scheduled_tasks.queue_name;

CREATE INDEX scheduled_tasks_handler_idx ON scheduled_tasks (handler, next_process_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0003' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0002';

-- Running upgrade dbscheduler_0003 -> dbscheduler_0004

ALTER TABLE scheduled_tasks ADD COLUMN priority INTEGER DEFAULT 0 NOT NULL;

ALTER TABLE scheduled_tasks ADD COLUMN task_group VARCHAR(255);

ALTER TABLE scheduled_tasks ADD COLUMN requires VARCHAR(255);

CREATE INDEX scheduled_tasks_group_idx ON scheduled_tasks (task_group, locked_by) WHERE task_group IS NOT NULL;

CREATE INDEX scheduled_tasks_pick_idx ON scheduled_tasks (handler, priority DESC, next_process_at) WHERE priority != 0;

CREATE TABLE scheduled_tasks_groups (
    name VARCHAR(255) NOT NULL, 
    max_running INTEGER NOT NULL, 
    updated_at VARCHAR(26), 
    PRIMARY KEY (name)
);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0004' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0003';

-- Running upgrade dbscheduler_0004 -> dbscheduler_0005

ALTER TABLE scheduled_tasks ADD COLUMN last_success_at VARCHAR(26);

ALTER TABLE scheduled_tasks ADD COLUMN alert_after DOUBLE;

ALTER TABLE scheduled_tasks ADD COLUMN alerted_at VARCHAR(26);

UPDATE scheduled_tasks SET last_success_at=scheduled_tasks.last_finished_at WHERE scheduled_tasks.last_status = 'success';

CREATE INDEX scheduled_tasks_alert_idx ON scheduled_tasks (alerted_at, alert_after);

CREATE TABLE scheduled_tasks_runs (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
    task_name VARCHAR(255) NOT NULL, 
    token BIGINT NOT NULL, 
    attempt INTEGER NOT NULL, 
    node_id VARCHAR(255) NOT NULL, 
    scheduled_at VARCHAR(26) NOT NULL, 
    started_at VARCHAR(26) NOT NULL, 
    finished_at VARCHAR(26) NOT NULL, 
    status VARCHAR(16) NOT NULL, 
    error VARCHAR(2000), 
    CONSTRAINT scheduled_tasks_runs_uq UNIQUE (task_name, token, started_at)
);

CREATE INDEX scheduled_tasks_runs_task_idx ON scheduled_tasks_runs (task_name, finished_at);

CREATE INDEX scheduled_tasks_runs_time_idx ON scheduled_tasks_runs (finished_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0005' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0004';

-- Running upgrade dbscheduler_0005 -> dbscheduler_0006

CREATE TABLE scheduled_tasks_items (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
    task_name VARCHAR(255) NOT NULL, 
    handler VARCHAR(255) NOT NULL, 
    batch_key VARCHAR(255) NOT NULL, 
    item TEXT, 
    due_at VARCHAR(26) NOT NULL, 
    moves BOOLEAN DEFAULT 0 NOT NULL, 
    pushed_at VARCHAR(26) NOT NULL
);

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
    tags TEXT, 
    handlers TEXT, 
    started_at VARCHAR(26) NOT NULL, 
    last_seen VARCHAR(26) NOT NULL, 
    running INTEGER NOT NULL, 
    PRIMARY KEY (node_id)
);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0008' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0007';

-- Running upgrade dbscheduler_0008 -> dbscheduler_0009

ALTER TABLE scheduled_tasks_runs ADD COLUMN traceback TEXT;

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0009' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0008';

-- Running upgrade dbscheduler_0009 -> dbscheduler_0010

CREATE INDEX scheduled_tasks_runs_status_idx ON scheduled_tasks_runs (status, finished_at);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0010' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0009';

-- Running upgrade dbscheduler_0010 -> dbscheduler_0011

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0011' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0010';

-- Running upgrade dbscheduler_0011 -> dbscheduler_0012

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0012' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0011';

