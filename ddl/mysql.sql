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

-- Running upgrade dbscheduler_0003 -> dbscheduler_0007

ALTER TABLE scheduled_tasks ADD COLUMN trigger_link VARCHAR(128);

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0007' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0003';

