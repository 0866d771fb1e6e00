//! The event types every released generation before V3 shares (dsh's frozen dispositions),
//! so each edge's closed inventory is this set plus its own differences.

use sessionlog_format::EventType;

/// The types in both the released V1 and V2 inventories. V1 adds `assistant/chunk`; V2 adds
/// `assistant/attempt` and the two feedback message types.
pub(crate) fn is_shared_released(kind: &EventType) -> bool {
    use EventType as T;
    matches!(
        kind,
        T::AgentPresetSelected
            | T::AgentInboxSpliced
            | T::ApprovalAsked
            | T::ApprovalDecided
            | T::ApprovalPolicy
            | T::AssistantMessage
            | T::CommandDone
            | T::CommandRun
            | T::CompactionEnd
            | T::CompactionPrune
            | T::CompactionStart
            | T::CompactionSummary
            | T::FeedbackRecord
            | T::GoalChange
            | T::HookInvoked
            | T::HookResult
            | T::LlmRetry
            | T::LlmRetryStarted
            | T::ModelSelection
            | T::PermissionPreset
            | T::PlanMode
            | T::RequestContext
            | T::RequestHeader
            | T::SandboxMode
            | T::ScheduleChange
            | T::DeliveryAccepted
            | T::SessionEndSeed
            | T::SessionTitle
            | T::SessionTitleLlmRequest
            | T::StepEnd
            | T::StepStart
            | T::SubagentDescriptor
            | T::SubagentModelSelectionPolicy
            | T::TeamMember
            | T::TeamMessageDelivered
            | T::TeamMessageQueued
            | T::TeamTask
            | T::TodoWrite
            | T::ToolWorkflowAgentEnd
            | T::ToolWorkflowAgentStart
            | T::ToolWorkflowRunEnd
            | T::ToolWorkflowRunStart
            | T::ToolCall
            | T::ToolCodeDispatch
            | T::ToolCodeDispatchStart
            | T::ToolResult
            | T::TurnEnd
            | T::TurnStart
            | T::UserMessage
            | T::WebDeepseekSearchLlmRequest
    )
}
