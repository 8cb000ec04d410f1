//! What one run of `setup` does: a plan worked out in full before
//! anything is written (so a file that can't be parsed stops the command
//! with nothing changed), then carried out file by file, each with its
//! record.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agentmesh_node::home::Home;
use serde::Serialize;

use super::files::{self, FileRecord, Records};
use super::{
    Agent, FOREIGN_NAMED_PER_FILE, Foreign, Ours, Scope, Target, claude, codex, utf8, which,
};

/// What happens to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// agentmesh creates it.
    Created,
    /// agentmesh's entries go into it.
    Merged,
    /// Its bytes from before agentmesh are put back.
    Restored,
    /// agentmesh created it, and it goes.
    Removed,
    /// Only agentmesh's entries come out (it was changed since).
    Unmerged,
    /// Nothing to do.
    Unchanged,
}

impl Action {
    /// Its name, as `--json` gives it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Merged => "merged",
            Action::Restored => "restored",
            Action::Removed => "removed",
            Action::Unmerged => "unmerged",
            Action::Unchanged => "unchanged",
        }
    }
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What happens to agentmesh's record of a file.
#[derive(Debug, Clone)]
pub(super) enum RecordUpdate {
    Keep,
    Save(Box<FileRecord>),
    Forget,
}

/// One file's part of a plan.
#[derive(Debug, Clone)]
pub(super) struct FileChange {
    pub(super) path: PathBuf,
    pub(super) action: Action,
    pub(super) before: Option<Vec<u8>>,
    pub(super) after: Option<Vec<u8>>,
    pub(super) record: RecordUpdate,
}

/// Everything a run will do, worked out before anything is written.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) files: Vec<FileChange>,
    pub(super) commands: Vec<claude::CliCommand>,
    pub(super) notes: Vec<String>,
    /// What is left alone: entries of others' running agentmesh, named.
    pub(super) foreign: Vec<String>,
    /// Someone else's entry holds the name setup's server needs, so
    /// setup's was not added.
    pub(super) blocked: bool,
    /// Setup's record of a `claude mcp add` goes, with no command to run
    /// (Claude Code no longer lists that registration).
    pub(super) forget_mcp: bool,
}

impl Plan {
    pub(super) fn is_empty(&self) -> bool {
        self.commands.is_empty() && self.files.iter().all(|f| f.action == Action::Unchanged)
    }

    /// Names the entries of others' in `path` that are left alone. `how`
    /// says how a person takes one out (for one in setup's way).
    fn name(&mut self, path: &Path, foreign: &[Foreign], uninstall: bool, how: &str, agent: Agent) {
        for f in foreign.iter().take(FOREIGN_NAMED_PER_FILE) {
            let mut note = format!(
                "{}: {} was left as it is: agentmesh setup did not write it (it is your own, or another agentmesh home's)",
                path.display(),
                f.what
            );
            if uninstall {
                note.push_str("; remove it by hand if it should go too");
            } else if f.same_as_ours {
                note.push_str(
                    "; it runs what setup's would, so none was added beside it, and `--uninstall` leaves it too",
                );
            } else if f.in_the_way {
                let agent = agent.name();
                note.push_str(&format!(
                    "; it has the name agentmesh's server needs, so agentmesh's was not added. Keep it if it is yours; to have setup's instead, take it out (if another agentmesh home's setup wrote it, `agentmesh --home THAT_HOME setup {agent} --uninstall`; else {how}) and run setup again"
                ));
            }
            self.foreign.push(note);
        }
        if foreign.len() > FOREIGN_NAMED_PER_FILE {
            self.foreign.push(format!(
                "{}: {} more entries that run agentmesh and that agentmesh setup did not write were left as they are",
                path.display(),
                foreign.len() - FOREIGN_NAMED_PER_FILE
            ));
        }
        // Someone else's server in setup's way is reported even when the
        // hooks went in around it.
        if !uninstall && foreign.iter().any(|f| f.in_the_way) {
            self.blocked = true;
        }
    }

    /// Every file this plan changes that setup may not write, as errors.
    pub(super) fn unwritable(&self) -> Vec<anyhow::Error> {
        self.files
            .iter()
            .filter_map(|f| {
                let verb = match f.action {
                    Action::Unchanged => return None,
                    Action::Removed => "remove",
                    _ => "change",
                };
                files::check_writable(&f.path, verb).err()
            })
            .collect()
    }
}

/// One setup: an agent at a scope, for one agentmesh home.
#[derive(Debug)]
pub(super) struct Setup {
    pub(super) agent: Agent,
    pub(super) scope: Scope,
    pub(super) owner: String,
    pub(super) records: Records,
    pub(super) ours: Ours,
    /// `claude` on the PATH (Claude Code only).
    pub(super) claude: Option<PathBuf>,
}

impl Setup {
    pub(super) fn new(
        home: &Home,
        agent: Agent,
        scope: Scope,
        agent_home: Option<&Path>,
    ) -> anyhow::Result<Setup> {
        Ok(Setup {
            agent,
            owner: scope.owner(agent),
            scope,
            records: Records::of(home),
            ours: Ours::new(agent, agent_home)?,
            claude: (agent == Agent::Claude).then(|| which("claude")).flatten(),
        })
    }

    /// Whether the MCP server goes through `claude mcp add`.
    fn registers(&self) -> bool {
        self.claude.is_some() && matches!(self.scope, Scope::User)
    }

    fn targets(&self) -> anyhow::Result<Vec<Target>> {
        match self.agent {
            Agent::Claude => claude::targets(&self.scope, self.registers()),
            Agent::Codex => codex::targets(&self.scope),
        }
    }

    pub(super) fn plan_install(&self) -> anyhow::Result<Plan> {
        let mut plan = Plan::default();
        if self.registers() {
            let (commands, foreign) = claude::register(&self.ours.server_line(), &self.records)?;
            plan.commands = commands;
            plan.name(
                &claude::user_config_file()?,
                &foreign,
                false,
                "with `claude mcp remove --scope user agentmesh`",
                self.agent,
            );
        }
        for t in self.targets()? {
            let (change, foreign) = self.install_file(&t)?;
            plan.name(
                &change.path,
                &foreign,
                false,
                "by hand from that file",
                self.agent,
            );
            plan.files.push(change);
        }
        if !plan.is_empty() {
            plan.notes = match self.agent {
                Agent::Claude => claude::notes(&self.scope, self.registers())?,
                Agent::Codex => codex::notes(&self.scope),
            };
        }
        Ok(plan)
    }

    fn install_file(&self, t: &Target) -> anyhow::Result<(FileChange, Vec<Foreign>)> {
        let path = files::resolve(&t.path)?;
        let before = files::read(&path)?;
        let text = utf8(&path, before.as_deref())?;
        let record = self.records.file(&path)?;
        let recorded = record.as_ref().map(|r| r.entries.as_slice());
        let edited = t
            .kind
            .install(&path, text, &self.ours, recorded.unwrap_or_default())?;
        let after = edited.text;
        let changed = text != Some(after.as_str());
        let record = match record {
            None if !changed => RecordUpdate::Keep,
            None => {
                let mut r = FileRecord::new(&path, t.kind, before.as_deref(), &self.owner);
                r.entries = edited.entries;
                RecordUpdate::Save(Box::new(r))
            }
            Some(mut r) => {
                let mut save = changed || r.entries != edited.entries;
                if !r.wrote(before.as_deref()) && changed {
                    if text.is_some_and(|tx| t.kind.has_ours(&path, tx, &r.entries)) {
                        // Edited by someone since, with setup's entries
                        // still in: putting the old bytes back would lose
                        // those edits.
                        r.byte_exact = false;
                    } else {
                        // Nothing of setup's is left: the file as it is
                        // now is the one to give back.
                        r = FileRecord::new(&path, t.kind, before.as_deref(), &self.owner);
                    }
                }
                r.entries = edited.entries;
                if !r.owners.contains(&self.owner) {
                    r.owners.push(self.owner.clone());
                    save = true;
                }
                if save {
                    RecordUpdate::Save(Box::new(r))
                } else {
                    RecordUpdate::Keep
                }
            }
        };
        let action = match (changed, &before) {
            (false, _) => Action::Unchanged,
            (true, None) => Action::Created,
            (true, Some(_)) => Action::Merged,
        };
        let change = FileChange {
            path,
            action,
            after: changed.then(|| after.into_bytes()),
            before,
            record,
        };
        Ok((change, edited.foreign))
    }

    pub(super) fn plan_uninstall(&self) -> anyhow::Result<Plan> {
        let mut plan = Plan::default();
        if self.agent == Agent::Claude && matches!(self.scope, Scope::User) {
            let (commands, foreign, forget) = claude::unregister(&self.records)?;
            if self.claude.is_some() {
                plan.commands = commands;
            } else if !commands.is_empty() {
                plan.notes.push(
                    "Claude Code lists agentmesh's MCP server in its user config, but `claude` is not on the PATH to remove it: run `claude mcp remove --scope user agentmesh`".into(),
                );
            }
            plan.forget_mcp = forget;
            plan.name(&claude::user_config_file()?, &foreign, true, "", self.agent);
        }
        let mut seen = BTreeSet::new();
        for r in self.records.files_of(&self.owner)? {
            seen.insert(r.path.clone());
            self.uninstall_recorded(r, &mut plan)?;
        }
        // Files of this scope setup has no record of (set up from another
        // home, or by hand): nothing in them is setup's, so nothing is
        // taken out; what runs agentmesh there is named. A user setup's
        // fallback .mcp.json is a project file, left alone.
        let targets = match self.agent {
            Agent::Claude => claude::targets(&self.scope, true)?,
            Agent::Codex => codex::targets(&self.scope)?,
        };
        for t in targets {
            // A file setup can't read or parse is not touched either.
            let Ok(path) = files::resolve(&t.path) else {
                continue;
            };
            if seen.contains(&path) || self.records.file(&path)?.is_some() {
                continue;
            }
            let Ok(Some(before)) = files::read(&path) else {
                continue;
            };
            let Ok(Some(text)) = utf8(&path, Some(&before)) else {
                continue;
            };
            if let Ok(edited) = t.kind.remove(&path, text, &[]) {
                plan.name(&path, &edited.foreign, true, "", self.agent);
            }
        }
        Ok(plan)
    }

    fn uninstall_recorded(&self, mut r: FileRecord, plan: &mut Plan) -> anyhow::Result<()> {
        let path = r.path.clone();
        let before = files::read(&path)?;
        let change = |action, after: Option<Vec<u8>>, record| FileChange {
            path: path.clone(),
            action,
            before: before.clone(),
            after,
            record,
        };
        if r.owners.len() > 1 {
            r.owners.retain(|o| *o != self.owner);
            plan.notes.push(format!(
                "{} is kept as it is: agentmesh's entries there are still used by `{}`",
                path.display(),
                r.owners.join("`, `")
            ));
            plan.files.push(change(
                Action::Unchanged,
                None,
                RecordUpdate::Save(Box::new(r)),
            ));
            return Ok(());
        }
        let Some(bytes) = &before else {
            plan.notes
                .push(format!("{} was already gone", path.display()));
            plan.files
                .push(change(Action::Unchanged, None, RecordUpdate::Forget));
            return Ok(());
        };
        let text = utf8(&path, Some(bytes))?.unwrap_or_default();
        let edited = r.kind.remove(&path, text, &r.entries)?;
        plan.name(&path, &edited.foreign, true, "", self.agent);
        if r.byte_exact && r.wrote(before.as_deref()) {
            plan.files.push(if r.existed {
                change(
                    Action::Restored,
                    Some(r.original_bytes()?),
                    RecordUpdate::Forget,
                )
            } else {
                change(Action::Removed, None, RecordUpdate::Forget)
            });
            return Ok(());
        }
        let after = edited.text;
        if after == text {
            plan.files
                .push(change(Action::Unchanged, None, RecordUpdate::Forget));
            return Ok(());
        }
        plan.notes.push(format!(
            "{} was changed since agentmesh wrote it, so it could not be restored byte for byte: only agentmesh's entries were taken out",
            path.display()
        ));
        plan.files
            .push(if !r.existed && r.kind.is_empty(&path, &after) {
                change(Action::Removed, None, RecordUpdate::Forget)
            } else {
                change(
                    Action::Unmerged,
                    Some(after.into_bytes()),
                    RecordUpdate::Forget,
                )
            });
        Ok(())
    }

    /// Carries a plan out: the agent's own commands first (the likeliest
    /// to fail), then the files, each with its record.
    pub(super) fn apply(&self, plan: &Plan) -> anyhow::Result<()> {
        if let Some(program) = &self.claude {
            for c in &plan.commands {
                claude::run(program, c, &self.records)?;
            }
        }
        if plan.forget_mcp {
            self.records.forget_mcp(&claude::user_config_file()?)?;
        }
        // Folders agentmesh created, removed once all the files are (two
        // files can share one).
        let mut created_dirs = vec![];
        for f in &plan.files {
            let mut record = f.record.clone();
            match (f.action, &f.after) {
                (Action::Unchanged, _) => {}
                (Action::Removed, _) => {
                    if let Err(e) = std::fs::remove_file(&f.path)
                        && e.kind() != std::io::ErrorKind::NotFound
                    {
                        return Err(anyhow::Error::new(e)
                            .context(format!("cannot remove {}", f.path.display())));
                    }
                    if let Some(r) = self.records.file(&f.path)? {
                        created_dirs.extend(r.created_dirs);
                    }
                }
                (_, Some(after)) => {
                    let made = files::create_parents(&f.path)?;
                    files::write_atomic(&f.path, after, None)?;
                    if let RecordUpdate::Save(r) = &mut record {
                        r.written_sha256 = files::sha256_hex(after);
                        if f.action == Action::Created && r.created_dirs.is_empty() {
                            r.created_dirs = made;
                        }
                    }
                }
                (_, None) => {}
            }
            match &record {
                RecordUpdate::Keep => {}
                RecordUpdate::Save(r) => self.records.save_file(r)?,
                RecordUpdate::Forget => self.records.forget_file(&f.path)?,
            }
        }
        files::remove_created_dirs(created_dirs);
        Ok(())
    }
}
