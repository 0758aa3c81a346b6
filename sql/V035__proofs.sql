-- Predict, then prove (`local/semantics prove`): each finding the rule catalog made on a team's
-- settings, the run that was to show it, and what the checker observed there. A finding that a
-- run does not confirm is a wrong rule or a checker defect: both worth keeping.
--
-- A run's topic settings beyond the cluster's defaults (a scenario's, a proof's), so that a proof
-- may take a run already made with the same producer and topic settings instead of making one.
ALTER TABLE runs ADD COLUMN topic_config jsonb;

CREATE TABLE proofs (
    proof_id    text        NOT NULL,   -- one `prove`
    made_at     timestamptz NOT NULL DEFAULT now(),
    subject     text        NOT NULL,   -- the mode, mode file or pipeline proved
    client      text,                   -- its producer's client; NULL for a pipeline
    given       jsonb       NOT NULL,   -- the settings given over the subject's, by family
    rule        text        NOT NULL,
    family      text        NOT NULL,
    settings    jsonb       NOT NULL,   -- what the rule read
    predicted   text        NOT NULL,   -- the kind the rule predicts
    scenario    text,                   -- the run's (with a consumer strategy: "strategy x scenario")
    run_id      text,                   -- NULL: not put to a run, with why
    reused      boolean     NOT NULL DEFAULT false,  -- a run made before the proof, with the same settings
    isolation   text,
    observed    bigint,
    confirmed   boolean,                -- NULL: not put to a run
    why         text        NOT NULL DEFAULT '',
    PRIMARY KEY (proof_id, rule)
);
