"""magnetar.storage"""
