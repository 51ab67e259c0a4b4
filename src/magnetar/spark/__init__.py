"""magnetar.spark"""
