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

-- Running upgrade dbscheduler_0003 -> dbscheduler_0007

ALTER TABLE scheduled_tasks ADD COLUMN trigger_link VARCHAR(128);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0007' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0003';

