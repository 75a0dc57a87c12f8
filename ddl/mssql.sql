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

-- Running upgrade dbscheduler_0003 -> dbscheduler_0007

ALTER TABLE scheduled_tasks ADD trigger_link VARCHAR(128) NULL;

GO

UPDATE scheduled_tasks_version SET version_num='dbscheduler_0007' WHERE scheduled_tasks_version.version_num = 'dbscheduler_0003';

GO

COMMIT;

GO

